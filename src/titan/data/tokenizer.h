// The tokenizer: byte-level BPE behind a regex pre-tokenizer, with special
// tokens, BOS/EOS and a parallel encoder. Loaded from a Hugging Face
// tokenizer.json, a tiktoken rank file or a built-in name (tokenizer_loader.h).
// A tokenizer.json that needs more (a normalizer, Metaspace, a SentencePiece
// Unigram model, BPE with an end-of-word suffix: T5 and CLIP) runs the general
// pipeline instead: normalizer, pre-tokenizer steps, model, one text segment
// at a time, as Hugging Face tokenizers does.
//
// Any byte string encodes and decode(encode(bytes)) == bytes: text is cut into
// runs of valid UTF-8, which go through the split regex, and runs of invalid
// bytes, each of which is one BPE piece. On valid UTF-8 the ids equal
// tiktoken's and Hugging Face's. (tiktoken's private _encode_bytes instead
// runs BPE once over the last regex piece plus every byte from the first
// invalid one to the end; the npm and Hugging Face peers only take valid
// text. So the split of invalid bytes is ours to choose, and this one keeps
// the text after a stray byte tokenized as it would be without it.)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "titan/data/bpe_model.h"
#include "titan/data/pre_tokenizer.h"
#include "titan/data/split_pattern.h"
#include "titan/data/text_normalizer.h"
#include "titan/data/unigram_model.h"

namespace titan::data {

struct SpecialToken {
  std::string text;
  uint32_t id = 0;
  // Hugging Face "added tokens" that are not special are matched in any text;
  // special ones only when EncodeOptions::allow_special is set.
  bool special = true;
};

struct EncodeOptions {
  bool allow_special = false;  // text like "<|endoftext|>" becomes its special token (else plain text)
  bool add_bos = false;
  bool add_eos = false;
  int threads = 1;  // > 1: chunks encoded in parallel; the ids are identical to one thread's
};

struct TokenizerConfig {
  std::string name;  // file path or built-in name: every error message names it
  BpeModel model;
  std::vector<std::string> split_patterns;  // applied in turn: each splits the previous one's pieces
  std::vector<bool> literal_patterns;       // same length; true: pattern is a literal string
  bool add_prefix_space = false;            // Hugging Face ByteLevel option: text gets a leading space
  std::vector<SpecialToken> specials;
  std::optional<uint32_t> bos, eos;

  // The general pipeline, used when `pipeline` is set (split_patterns,
  // literal_patterns and add_prefix_space are then unused).
  std::optional<std::vector<PreTokenizerStep>> pipeline;
  TextNormalizer normalizer;
  std::optional<UnigramModel> unigram;  // set: the model is this, not `model`
  // Decoding as Hugging Face's Metaspace decoder: the replacement becomes a
  // space, except in the first token when `metaspace_strip_first`.
  std::string metaspace_decoding;
  bool metaspace_strip_first = false;
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerConfig config);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  const std::string& name() const { return name_; }
  // Number of ids (largest id + 1), specials included.
  uint32_t vocab_size() const { return vocab_size_; }
  std::optional<uint32_t> bos_id() const { return bos_; }
  std::optional<uint32_t> eos_id() const { return eos_; }
  const BpeModel& model() const { return model_; }
  // The Unigram model, or nullptr for a BPE tokenizer.
  const UnigramModel* unigram() const { return unigram_ ? &*unigram_ : nullptr; }
  // True when text runs through the general pipeline (normalizer, pre-tokenizer steps).
  bool general_pipeline() const { return pipeline_.has_value(); }
  const TextNormalizer& normalizer() const { return normalizer_; }
  const std::vector<SpecialToken>& special_tokens() const { return specials_; }
  const std::vector<std::string>& split_patterns() const { return pattern_texts_; }
  bool add_prefix_space() const { return add_prefix_space_; }

  // The id of special token `text`; a titan::Error listing a few known ones otherwise.
  uint32_t special_token_id(std::string_view text) const;
  std::optional<uint32_t> find_special_token(std::string_view text) const;

  std::vector<uint32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  void encode_into(std::string_view text, const EncodeOptions& options, std::vector<uint32_t>& out) const;

  // Bytes of the ids, concatenated (not necessarily valid UTF-8), Metaspace's
  // replacement turned back into spaces where the tokenizer.json's decoder
  // says so. An id outside the vocabulary is a titan::Error naming it.
  std::string decode(std::span<const uint32_t> ids) const;
  // Bytes of one id (a special token's text for specials).
  std::string_view token_bytes(uint32_t id) const;
  // A 64-bit digest of everything that decides the ids (every token's bytes,
  // the special tokens, the split patterns, BOS/EOS): equal fingerprints mean
  // the same ids for the same text. Token shards record it.
  uint64_t fingerprint() const;

  struct Scratch;  // per-thread encoder state, pooled

 private:
  struct Segment;
  class ScratchLease;
  void find_segments(std::string_view text, bool allow_special, std::vector<Segment>& segments) const;
  // Encodes text[begin, end) (inside `segments`); returns false if a piece
  // crosses `end`, which makes a parallel split point unsafe.
  bool encode_range(std::string_view text, const std::vector<Segment>& segments, size_t begin, size_t end,
                    std::vector<uint32_t>& out, Scratch& scratch) const;
  void encode_text_segment(std::string_view subject, size_t begin, size_t stop, size_t* reached,
                           std::vector<uint32_t>& out, Scratch& scratch) const;
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out, Scratch& scratch) const;
  void split_chain(std::string_view text, size_t level, std::vector<uint32_t>& out, Scratch& scratch) const;
  void encode_general(std::string_view text, bool at_input_start, std::vector<uint32_t>& out, Scratch& scratch) const;
  bool model_has(uint32_t id) const;
  std::string_view model_token(uint32_t id) const;

  std::string name_;
  BpeModel model_;
  std::vector<std::unique_ptr<SplitPattern>> patterns_;
  std::vector<std::string> pattern_texts_;
  bool add_prefix_space_ = false;
  std::vector<SpecialToken> specials_;
  std::vector<int32_t> special_of_id_;   // id -> index into specials_, or -1
  std::vector<size_t> special_lengths_;  // distinct lengths of matchable texts, longest first
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  std::unordered_map<std::string, size_t, StringHash, std::equal_to<>> special_index_;  // text -> specials_ index
  std::optional<uint32_t> bos_, eos_;
  std::optional<std::vector<PreTokenizerStep>> pipeline_;
  TextNormalizer normalizer_;
  std::optional<UnigramModel> unigram_;
  std::string metaspace_decoding_;
  bool metaspace_strip_first_ = false;
  uint32_t vocab_size_ = 0;
  bool first_byte_special_[256] = {};
  bool first_byte_always_[256] = {};
  bool has_always_ = false;
  bool special_has_newline_ = false;
  std::unique_ptr<struct ScratchPool> pool_;
};

}  // namespace titan::data
