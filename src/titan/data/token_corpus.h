// The documents a loader packs, as token spans: memory-mapped shards listed by
// a manifest (what `titan data prepare` writes), bare shard files, or raw
// text/JSONL/fortune files tokenized in memory when the loader starts. A chat
// corpus (chat_dataset.h) also gives each document a loss mask: from chat
// shards (`titan data prepare --chat`) or chat JSONL rendered at start.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "titan/data/chat_dataset.h"
#include "titan/data/corpus_reader.h"
#include "titan/data/token_shard.h"
#include "titan/data/tokenizer.h"

namespace titan::data {

// manifest.json beside the shards.
struct ShardManifest {
  static constexpr const char* kFileName = "manifest.json";
  std::string tokenizer;  // "tokenizer.json" (beside the manifest), a path, or a built-in name
  uint32_t vocab_size = 0;
  // Tokenizer::fingerprint() of the tokenizer that made the shards (manifests
  // written before it was recorded have none).
  std::optional<uint64_t> tokenizer_fingerprint;
  std::optional<uint32_t> bos, eos;
  std::vector<std::string> shards;  // file names relative to the manifest's folder
  uint64_t documents = 0, tokens = 0;
  // Chat shards (with loss masks): the template they were rendered with and
  // which tokens they train on ("assistant" or "all").
  bool chat = false;
  std::string chat_template, train_on;
};

ShardManifest read_shard_manifest(const std::filesystem::path& path);
void write_shard_manifest(const std::filesystem::path& path, const ShardManifest& manifest);

class TokenCorpus {
 public:
  struct Options {
    CorpusOptions corpus;   // for raw inputs
    std::string tokenizer;  // for raw inputs; overrides a manifest's BOS/EOS source when set
    bool verify_checksums = true;
    int threads = 0;  // tokenization threads for raw inputs; 0 = all cores
    // Set: a chat corpus. Raw inputs are chat JSONL(.zst) rendered with the
    // template; shards must carry loss masks; chat->max_tokens applies the
    // overlong policy to both. Unset: shards with loss masks are refused.
    std::optional<ChatOptions> chat;
  };

  // Each path: a folder with manifest.json, a manifest.json, a *.tshard file,
  // or a raw corpus file/folder (needs options.tokenizer).
  TokenCorpus(const std::vector<std::string>& paths, const Options& options);
  ~TokenCorpus();

  uint64_t num_documents() const { return total_documents_; }
  uint64_t num_tokens() const { return total_tokens_; }
  std::span<const uint32_t> document(uint64_t index) const;
  // The document's loss mask (one 0/1 byte per token, 1: trained on); empty
  // unless this is a chat corpus.
  std::span<const uint8_t> loss_mask(uint64_t index) const;
  bool is_chat() const { return chat_; }
  // A chat corpus's counts (after the overlong policy).
  const ChatStats& chat_stats() const { return chat_stats_; }
  uint32_t vocab_size() const { return vocab_size_; }
  std::optional<uint32_t> bos_id() const { return bos_; }
  std::optional<uint32_t> eos_id() const { return eos_; }

 private:
  struct Part {
    std::unique_ptr<MappedShard> shard;  // or, when null, in-memory tokens:
    std::vector<uint32_t> tokens;
    std::vector<uint64_t> ends;
    std::vector<uint8_t> mask;  // in-memory chat documents' loss masks
    // A chat shard the overlong policy changed: its kept documents (indices
    // into the shard) and their kept lengths.
    bool viewed = false;
    std::vector<uint64_t> kept, kept_length;
    uint64_t first_document = 0;
    uint64_t num_documents() const { return shard ? (viewed ? kept.size() : shard->num_documents()) : ends.size(); }
  };
  const Part& part_of(uint64_t index, uint64_t* local) const;
  void add_shard(const std::filesystem::path& path, const Options& options);
  void set_vocabulary(uint32_t vocab_size, std::optional<uint32_t> bos, std::optional<uint32_t> eos,
                      const std::string& source);

  std::vector<Part> parts_;
  uint64_t total_documents_ = 0, total_tokens_ = 0;
  uint32_t vocab_size_ = 0;
  bool vocabulary_set_ = false;
  std::optional<uint32_t> bos_, eos_;
  bool chat_ = false;
  ChatStats chat_stats_;
};

}  // namespace titan::data
