// A tokenizer.json "pre_tokenizer" as a list of steps that cut (and for
// Metaspace and ByteLevel's prefix, rewrite) normalized text into the pieces
// the model encodes one by one: Split with each of Hugging Face's delimiter
// behaviours (WhitespaceSplit and Digits are Splits), Metaspace and
// ByteLevel. Each step applies to every piece the previous ones made, as
// Hugging Face's Sequence does.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/split_pattern.h"

namespace titan::data {

struct PreTokenizerStep {
  enum Kind { kSplit, kMetaspace, kByteLevel };
  // Hugging Face's SplitDelimiterBehavior: what becomes of each match.
  enum Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  enum Prepend { kAlways, kFirst, kNever };

  Kind kind = kSplit;
  // kSplit; kByteLevel with use_regex; kMetaspace: the replacement as a literal
  std::shared_ptr<const SplitPattern> pattern;
  Behavior behavior = kIsolated;  // kSplit
  bool invert = false;            // kSplit: the gaps between matches are the delimiters
  std::string replacement;        // kMetaspace: what a space becomes ("▁")
  Prepend prepend = kAlways;      // kMetaspace
  bool split = true;              // kMetaspace: cut before each replacement
  bool add_prefix_space = false;  // kByteLevel
  std::string describe;           // for the fingerprint: the step as the file wrote it
};

struct PreToken {
  std::string text;
  size_t offset = 0;  // where it starts in the text given to pre_tokenize (before prefixes were added)
};

// Cuts `text` by `steps`; `at_input_start`: the text begins the whole input
// (Metaspace's "first" scheme prepends only there). Empty pieces are dropped.
void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view text, bool at_input_start,
                  std::vector<PreToken>& pieces, SplitScratchCache& scratch);

}  // namespace titan::data
