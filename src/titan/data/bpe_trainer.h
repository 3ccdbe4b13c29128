// Training a byte-level BPE tokenizer on a corpus (`titan tokenizer train`).
// Pre-tokenizes with the split regex, counts distinct pieces, then merges the
// most frequent adjacent pair repeatedly with incremental pair counts and a
// lazy max-heap, so each merge touches only the words that contain its pair.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/tokenizer.h"

namespace titan::data {

// Llama 3's (and cl100k_base's) split pattern: the default for new tokenizers.
extern const char* const kDefaultSplitPattern;

struct BpeTrainerOptions {
  uint32_t vocab_size = 8192;  // total ids: 256 bytes + merges + special tokens
  // Llama 3's document markers, and the three its chat format is written with
  // (<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>), so that a
  // model trained with this tokenizer can be fine-tuned on chat data with the
  // built-in "llama3" template. Same order as Llama 3's ids.
  std::vector<std::string> special_tokens = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                             "<|end_header_id|>", "<|eot_id|>"};
  std::string split_pattern = kDefaultSplitPattern;
  uint64_t min_frequency = 2;  // stop early when the best pair is rarer than this
  int threads = 0;             // pre-tokenization threads; 0 = all cores
  std::string name = "trained tokenizer";
};

struct BpeTrainingStats {
  uint64_t pieces = 0;         // pre-tokenized pieces in the corpus
  uint64_t unique_pieces = 0;  // distinct ones (the "words" BPE works on)
  uint32_t merges = 0;
  double pretokenize_seconds = 0, merge_seconds = 0;
};

// The trained tokenizer: ids 0..255 are the bytes, then one id per new merged
// token in merge order, then the special tokens. BOS/EOS are
// <|begin_of_text|>/<|end_of_text|> when present. An empty corpus is an error.
Tokenizer train_bpe(const std::vector<std::string_view>& documents, const BpeTrainerOptions& options,
                    BpeTrainingStats* stats = nullptr);

}  // namespace titan::data
