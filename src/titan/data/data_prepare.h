// `titan data prepare`: raw text (fortune, plain, JSONL) to a tokenizer (given
// or trained on the corpus) and token shards with a manifest — the dataset
// format the loader reads fastest. With no inputs it prepares the embedded
// default: the English `fortunes` corpus the setup script installs. With
// chat options it prepares chat conversations instead (chat_dataset.h):
// rendered by a chat template and stored with their loss masks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "titan/data/bpe_trainer.h"
#include "titan/data/chat_dataset.h"
#include "titan/data/corpus_reader.h"
#include "titan/data/token_corpus.h"

namespace titan::data {

// Where Debian's `fortunes` package puts its English fortune files.
extern const char* const kDefaultCorpusDir;

struct PrepareOptions {
  std::vector<std::string> inputs;  // empty: kDefaultCorpusDir, fortune format
  CorpusOptions corpus;
  std::string tokenizer;          // a tokenizer.json, rank file or built-in name; or:
  uint32_t train_vocab_size = 0;  // > 0: train a byte-level BPE of this size on the inputs
  std::string output = "data/fortunes";
  uint64_t shard_tokens = uint64_t{1} << 26;  // tokens per shard (before the document that crosses it)
  std::string bos_token, eos_token;           // override the tokenizer's BOS/EOS ("none" for no token)
  int threads = 0;
  // Set: the inputs are chat JSONL(.zst) (needs `tokenizer`; chat->max_tokens
  // > 0 applies the overlong policy now). The manifest records "chat".
  std::optional<ChatOptions> chat;
  std::function<void(const std::string&)> log;  // progress lines (may be empty)
};

struct PrepareResult {
  ShardManifest manifest;
  std::filesystem::path manifest_path;
  std::optional<BpeTrainingStats> training;
  std::optional<ChatStats> chat;
  double seconds = 0;
};

PrepareResult prepare_dataset(const PrepareOptions& options);

}  // namespace titan::data
