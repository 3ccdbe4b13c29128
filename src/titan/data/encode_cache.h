// A per-thread cache from pre-tokenized pieces to their BPE ids. Natural text
// repeats the same words, so most pieces after the first few kilobytes are hits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class EncodeCache {
 public:
  // Appends the cached ids of `piece` to `out`; false if absent.
  bool find(std::string_view piece, uint64_t hash, std::vector<uint32_t>& out) const {
    if (slots_.empty()) return false;
    for (size_t slot = hash & mask_;; slot = (slot + 1) & mask_) {
      const Slot& s = slots_[slot];
      if (s.key_size == 0) return false;
      if (s.hash == hash && std::string_view(keys_).substr(s.key_offset, s.key_size) == piece) {
        out.insert(out.end(), values_.begin() + s.value_offset, values_.begin() + s.value_offset + s.value_size);
        return true;
      }
    }
  }

  void insert(std::string_view piece, uint64_t hash, const uint32_t* ids, size_t count) {
    if (piece.empty() || piece.size() > kMaxPieceBytes) return;
    if (slots_.empty() || used_ + 1 > (slots_.size() / 4) * 3 || keys_.size() > kMaxArenaBytes) reset();
    size_t slot = hash & mask_;
    while (slots_[slot].key_size != 0) slot = (slot + 1) & mask_;
    slots_[slot] = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(piece.size()),
                        static_cast<uint32_t>(values_.size()), static_cast<uint32_t>(count)};
    keys_.append(piece);
    values_.insert(values_.end(), ids, ids + count);
    ++used_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_offset = 0, key_size = 0;  // key_size 0: empty slot
    uint32_t value_offset = 0, value_size = 0;
  };
  static constexpr size_t kCapacity = size_t{1} << 16;
  static constexpr size_t kMaxPieceBytes = 256;
  static constexpr size_t kMaxArenaBytes = size_t{8} << 20;

  // Full: start over rather than evict (bounded memory, no bookkeeping per hit).
  void reset() {
    slots_.assign(kCapacity, Slot{});
    mask_ = kCapacity - 1;
    used_ = 0;
    keys_.clear();
    values_.clear();
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0, used_ = 0;
  std::string keys_;
  std::vector<uint32_t> values_;
};

}  // namespace titan::data
