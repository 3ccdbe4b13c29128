// A tokenizer.json "normalizer": the steps that rewrite text before it is
// pre-tokenized (T5's Precompiled charsmap and space squeezing, CLIP's NFC,
// whitespace folding and lowercasing). Each step does what Hugging Face
// tokenizers' step of that name does; Unicode forms and case come from ICU.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/precompiled_charsmap.h"
#include "titan/data/split_pattern.h"

namespace titan::data {

struct NormalizerStep {
  enum Kind { kPrecompiled, kReplace, kStrip, kLowercase, kNfc, kNfd, kNfkc, kNfkd, kPrepend };
  Kind kind = kLowercase;
  std::shared_ptr<const PrecompiledCharsmap> charsmap;  // kPrecompiled
  std::shared_ptr<const SplitPattern> pattern;          // kReplace
  std::string content;                                  // kReplace: the replacement; kPrepend: the prefix
  bool strip_left = false, strip_right = false;         // kStrip
  std::string describe;                                 // for the fingerprint: the step as the file wrote it
};

class TextNormalizer {
 public:
  TextNormalizer() = default;
  explicit TextNormalizer(std::vector<NormalizerStep> steps) : steps_(std::move(steps)) {}

  bool empty() const { return steps_.empty(); }
  const std::vector<NormalizerStep>& steps() const { return steps_; }
  // The normalized form of valid UTF-8 `text`.
  std::string normalize(std::string_view text, SplitScratchCache& scratch) const;

 private:
  std::vector<NormalizerStep> steps_;
};

}  // namespace titan::data
