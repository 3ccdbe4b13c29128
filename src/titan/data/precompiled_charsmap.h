// SentencePiece's precompiled_charsmap (a tokenizer.json "Precompiled"
// normalizer, T5's and most SentencePiece models'): a Darts double-array trie
// over UTF-8 keys whose values point into a block of NUL-terminated
// replacement strings. Applied as Hugging Face tokenizers applies it, which
// is what a tokenizer.json means (see normalize()).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class SplitPattern;
class SplitScratchCache;

class PrecompiledCharsmap {
 public:
  // `blob`: the decoded bytes (u32 little-endian trie size in bytes, the trie's
  // u32 units, then the replacement strings). A malformed blob is a
  // titan::Error naming `source`.
  PrecompiledCharsmap(std::string_view blob, std::string source);
  ~PrecompiledCharsmap();
  PrecompiledCharsmap(PrecompiledCharsmap&&) noexcept;
  PrecompiledCharsmap& operator=(PrecompiledCharsmap&&) noexcept;

  const std::string& blob() const { return blob_; }

  // The replacement for `chunk`: the value of the SHORTEST trie key that is a
  // prefix of `chunk` (the first of the trie's common-prefix results, as the
  // spm_precompiled crate Hugging Face uses takes it; SentencePiece's own
  // normalizer takes the longest). nullopt when no key is a prefix.
  std::optional<std::string_view> transform(std::string_view chunk) const;

  // Appends the normalized form of valid UTF-8 `text` to `out`. Hugging Face's
  // rule: the text is cut into extended grapheme clusters; a cluster shorter
  // than 6 bytes whose start matches a key is replaced whole (so a combining
  // mark after a mapped character is dropped with it); otherwise each
  // character is replaced by its own match, or kept.
  void normalize(std::string_view text, std::string& out, SplitScratchCache& scratch) const;

 private:
  std::string source_;
  std::string blob_;
  std::vector<uint32_t> units_;
  std::string_view replacements_;  // into blob_
  std::unique_ptr<SplitPattern> graphemes_;
};

}  // namespace titan::data
