// Byte-level BPE: a vocabulary of byte strings and the ranked merges that build
// them. One model serves both families of files: tiktoken rank files (a merge
// is any split of a token into two tokens, ranked by the token's rank) and
// Hugging Face merges lists (ranked by position in the list).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace titan::data {

// Scratch buffers for encode_piece, reused across calls (one per thread).
struct BpeWork {
  std::vector<uint32_t> ids, merged, ranks;
  std::vector<uint32_t> prev, next;
  std::vector<uint64_t> heap;
};

class BpeModel {
 public:
  static constexpr uint32_t kNoRank = 0xFFFFFFFFu;

  BpeModel() = default;

  // tiktoken semantics: token i (its bytes) has rank and id i; an empty string
  // marks an unused id. Every split of a token into two tokens is a merge with
  // that token's rank, which reproduces tiktoken's "merge the adjacent pair
  // whose concatenation has the lowest rank" exactly. Pieces that are a whole
  // token are emitted as that token (tiktoken's first check).
  static BpeModel from_ranks(std::vector<std::string> tokens, std::string_view source);

  // Hugging Face semantics: merges[r] = (left id, right id) has rank r; the
  // result is the token whose bytes are left + right. `ignore_merges` emits a
  // piece that is a whole token directly (Llama 3's tokenizer.json sets it).
  static BpeModel from_merges(std::vector<std::string> tokens, const std::vector<std::pair<uint32_t, uint32_t>>& merges,
                              bool ignore_merges, std::string_view source);

  // Number of ids (the largest id + 1).
  uint32_t size() const { return static_cast<uint32_t>(present_.size()); }
  bool has(uint32_t id) const { return id < present_.size() && present_[id]; }
  std::string_view token(uint32_t id) const {
    return std::string_view(arena_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
  }
  // The id whose bytes are `bytes` (with their hash_bytes), if any.
  std::optional<uint32_t> find(std::string_view bytes, uint64_t hash) const;
  std::optional<uint32_t> find(std::string_view bytes) const;
  bool ignore_merges() const { return ignore_merges_; }
  size_t num_merges() const { return num_merges_; }
  // Ranked merges as (left, right) ids, in rank order (for writing tokenizer.json).
  std::vector<std::pair<uint32_t, uint32_t>> merges_in_rank_order() const;

  // Hugging Face's end_of_word_suffix (CLIP's "</w>"): a piece's last byte
  // starts as the token of that byte followed by `suffix`, which must exist
  // for every byte value (a titan::Error naming `source` otherwise).
  void set_end_of_word_suffix(std::string suffix, std::string_view source);
  const std::string& end_of_word_suffix() const { return suffix_; }

  // Appends the BPE encoding of `piece` (non-empty) to `out`, ignoring
  // ignore_merges (the caller checks the whole-token case).
  void merge(std::string_view piece, std::vector<uint32_t>& out, BpeWork& work) const;

 private:
  struct PairValue {
    uint32_t rank = kNoRank;
    uint32_t merged = 0;
  };
  void set_tokens(std::vector<std::string> tokens, std::string_view source);
  void build_pair_table(std::vector<std::pair<uint64_t, PairValue>> pairs);
  PairValue find_pair(uint32_t left, uint32_t right) const {
    const uint64_t key = (static_cast<uint64_t>(left) << 32) | right;
    for (uint64_t slot = pair_hash(key) & pair_mask_;; slot = (slot + 1) & pair_mask_) {
      if (pair_keys_[slot] == key) return pair_values_[slot];
      if (pair_keys_[slot] == kEmptyKey) return {};
    }
  }
  static uint64_t pair_hash(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 20; }
  void merge_small(std::vector<uint32_t>& out, BpeWork& work, size_t n) const;
  void merge_large(std::vector<uint32_t>& out, BpeWork& work, size_t n) const;

  static constexpr uint64_t kEmptyKey = ~0ull;

  std::string arena_;              // all token bytes, back to back
  std::vector<uint64_t> offsets_;  // token i is arena_[offsets_[i], offsets_[i + 1])
  std::vector<uint8_t> present_;
  uint32_t byte_ids_[256] = {};  // the single-byte token of each byte value
  std::string suffix_;
  uint32_t suffix_byte_ids_[256] = {};  // byte + suffix_, when suffix_ is set
  // bytes -> id: open addressing, slot holds id + 1 (0 = empty) and a hash tag.
  std::vector<uint32_t> token_slots_, token_tags_;
  uint64_t token_mask_ = 0;
  // (left, right) -> (rank, merged id): open addressing on the packed pair.
  std::vector<uint64_t> pair_keys_;
  std::vector<PairValue> pair_values_;
  uint64_t pair_mask_ = 0;
  size_t num_merges_ = 0;
  bool ignore_merges_ = true;
};

}  // namespace titan::data
