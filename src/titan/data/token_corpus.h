// The documents a loader packs, as token spans: memory-mapped shards listed by
// a manifest (what `titan data prepare` writes), bare shard files, or raw
// text/JSONL/fortune files tokenized in memory when the loader starts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

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
  };

  // Each path: a folder with manifest.json, a manifest.json, a *.tshard file,
  // or a raw corpus file/folder (needs options.tokenizer).
  TokenCorpus(const std::vector<std::string>& paths, const Options& options);
  ~TokenCorpus();

  uint64_t num_documents() const { return total_documents_; }
  uint64_t num_tokens() const { return total_tokens_; }
  std::span<const uint32_t> document(uint64_t index) const;
  uint32_t vocab_size() const { return vocab_size_; }
  std::optional<uint32_t> bos_id() const { return bos_; }
  std::optional<uint32_t> eos_id() const { return eos_; }

 private:
  struct Part {
    std::unique_ptr<MappedShard> shard;  // or, when null, in-memory tokens:
    std::vector<uint32_t> tokens;
    std::vector<uint64_t> ends;
    uint64_t first_document = 0;
    uint64_t num_documents() const { return shard ? shard->num_documents() : ends.size(); }
  };
  void add_shard(const std::filesystem::path& path, bool verify);
  void set_vocabulary(uint32_t vocab_size, std::optional<uint32_t> bos, std::optional<uint32_t> eos,
                      const std::string& source);

  std::vector<Part> parts_;
  uint64_t total_documents_ = 0, total_tokens_ = 0;
  uint32_t vocab_size_ = 0;
  bool vocabulary_set_ = false;
  std::optional<uint32_t> bos_, eos_;
};

}  // namespace titan::data
