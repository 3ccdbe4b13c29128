#include "titan/data/token_corpus.h"

#include <omp.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

#include "titan/core/error.h"
#include "titan/data/file_io.h"
#include "titan/data/tokenizer_loader.h"

namespace titan::data {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::optional<uint32_t> optional_id(const json& root, const char* key, const std::string& source) {
  const auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::nullopt;
  TITAN_CHECK(it->is_number_unsigned() && it->get<uint64_t>() < (1u << 24), "{}: \"{}\" must be a token id", source,
              key);
  return static_cast<uint32_t>(it->get<uint64_t>());
}

bool holds_token_shards(const fs::path& folder) {
  std::error_code error;
  if (!fs::is_directory(folder, error)) return false;
  for (const auto& entry : fs::recursive_directory_iterator(folder, error)) {
    if (entry.path().extension() == ".tshard") return true;
  }
  return false;
}

}  // namespace

ShardManifest read_shard_manifest(const fs::path& path) {
  const std::string source = path.string();
  json root;
  try {
    root = json::parse(read_file(path, "shard manifest"));
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  TITAN_CHECK(root.is_object(), "{}: expected a JSON object", source);
  TITAN_CHECK(root.value("format", std::string()) == "titan-token-shards",
              "{}: not a titan shard manifest (\"format\")", source);
  ShardManifest manifest;
  const auto version = root.find("version");
  TITAN_CHECK(version != root.end() && *version == 1, "{}: unsupported manifest version", source);
  const auto vocab = root.find("vocab_size");
  TITAN_CHECK(vocab != root.end() && vocab->is_number_unsigned() && vocab->get<uint64_t>() > 0 &&
                  vocab->get<uint64_t>() <= (1u << 24),
              "{}: \"vocab_size\" must be a positive integer", source);
  manifest.vocab_size = static_cast<uint32_t>(vocab->get<uint64_t>());
  manifest.bos = optional_id(root, "bos_id", source);
  manifest.eos = optional_id(root, "eos_id", source);
  manifest.tokenizer = root.value("tokenizer", std::string());
  if (const auto fingerprint = root.find("tokenizer_fingerprint"); fingerprint != root.end()) {
    const std::string text = fingerprint->is_string() ? fingerprint->get<std::string>() : std::string();
    uint64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
    TITAN_CHECK(text.size() == 16 && error == std::errc() && end == text.data() + text.size(),
                "{}: \"tokenizer_fingerprint\" must be 16 hexadecimal digits", source);
    manifest.tokenizer_fingerprint = value;
  }
  const auto shards = root.find("shards");
  TITAN_CHECK(shards != root.end() && shards->is_array(), "{}: \"shards\" must be an array", source);
  for (size_t i = 0; i < shards->size(); ++i) {
    const json& shard = (*shards)[i];
    TITAN_CHECK(shard.is_object() && shard.contains("file") && shard["file"].is_string(),
                "{}: shards[{}]: expected {{\"file\": ...}}", source, i);
    const std::string file = shard["file"].get<std::string>();
    TITAN_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "..",
                "{}: shards[{}]: file '{}' must be a plain name beside the manifest", source, i, file);
    manifest.shards.push_back(file);
  }
  manifest.documents = root.value("documents", uint64_t{0});
  manifest.tokens = root.value("tokens", uint64_t{0});
  return manifest;
}

void write_shard_manifest(const fs::path& path, const ShardManifest& manifest) {
  nlohmann::ordered_json root;
  root["format"] = "titan-token-shards";
  root["version"] = 1;
  root["tokenizer"] = manifest.tokenizer;
  root["vocab_size"] = manifest.vocab_size;
  if (manifest.tokenizer_fingerprint)
    root["tokenizer_fingerprint"] = fmt::format("{:016x}", *manifest.tokenizer_fingerprint);
  root["bos_id"] = manifest.bos ? nlohmann::ordered_json(*manifest.bos) : nlohmann::ordered_json(nullptr);
  root["eos_id"] = manifest.eos ? nlohmann::ordered_json(*manifest.eos) : nlohmann::ordered_json(nullptr);
  root["documents"] = manifest.documents;
  root["tokens"] = manifest.tokens;
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const auto& file : manifest.shards) shards.push_back({{"file", file}});
  root["shards"] = shards;
  write_file_atomic(path, root.dump(2) + "\n");
}

TokenCorpus::~TokenCorpus() = default;

void TokenCorpus::set_vocabulary(uint32_t vocab_size, std::optional<uint32_t> bos, std::optional<uint32_t> eos,
                                 const std::string& source) {
  if (vocabulary_set_) {
    TITAN_CHECK(vocab_size == vocab_size_ && bos == bos_ && eos == eos_,
                "{}: its vocabulary (size {}) differs from the other inputs' (size {}): mixed tokenizers", source,
                vocab_size, vocab_size_);
    return;
  }
  vocabulary_set_ = true;
  vocab_size_ = vocab_size;
  bos_ = bos;
  eos_ = eos;
}

void TokenCorpus::add_shard(const fs::path& path, bool verify) {
  Part part;
  part.shard = std::make_unique<MappedShard>(path, verify);
  part.first_document = total_documents_;
  total_documents_ += part.shard->num_documents();
  total_tokens_ += part.shard->num_tokens();
  parts_.push_back(std::move(part));
}

TokenCorpus::TokenCorpus(const std::vector<std::string>& paths, const Options& options) {
  TITAN_CHECK(!paths.empty(), "no dataset paths given");
  std::shared_ptr<const Tokenizer> tokenizer;
  if (!options.tokenizer.empty()) tokenizer = load_tokenizer(options.tokenizer);
  std::vector<std::string> raw_inputs;
  for (const std::string& input : paths) {
    const fs::path path(input);
    std::error_code error;
    fs::path manifest_path;
    if (fs::is_directory(path, error) && fs::exists(path / ShardManifest::kFileName, error)) {
      manifest_path = path / ShardManifest::kFileName;
    } else if (path.filename() == ShardManifest::kFileName) {
      manifest_path = path;
    }
    if (!manifest_path.empty()) {
      const ShardManifest manifest = read_shard_manifest(manifest_path);
      if (tokenizer) {
        TITAN_CHECK(tokenizer->vocab_size() <= manifest.vocab_size,
                    "{}: shards were made with a vocabulary of {}, but tokenizer {} has {}", manifest_path.string(),
                    manifest.vocab_size, tokenizer->name(), tokenizer->vocab_size());
        // Equal sizes are not enough: the ids must mean the same tokens.
        TITAN_CHECK(!manifest.tokenizer_fingerprint || *manifest.tokenizer_fingerprint == tokenizer->fingerprint(),
                    "{}: the shards were made with tokenizer '{}' (fingerprint {:016x}), but this job uses {} "
                    "(fingerprint {:016x}): the ids would mean other tokens. Use the dataset's tokenizer, or prepare "
                    "the data again with this one",
                    manifest_path.string(), manifest.tokenizer, *manifest.tokenizer_fingerprint, tokenizer->name(),
                    tokenizer->fingerprint());
      }
      set_vocabulary(manifest.vocab_size, manifest.bos, manifest.eos, manifest_path.string());
      for (const auto& shard : manifest.shards)
        add_shard(manifest_path.parent_path() / shard, options.verify_checksums);
    } else if (path.extension() == ".tshard") {
      TITAN_CHECK(tokenizer != nullptr,
                  "{}: a bare shard needs a tokenizer (for BOS/EOS); pass one or its folder's "
                  "manifest.json",
                  input);
      add_shard(path, options.verify_checksums);
      set_vocabulary(parts_.back().shard->header().vocab_size, tokenizer->bos_id(), tokenizer->eos_id(), input);
    } else {
      // A folder of shards without its manifest is what an interrupted
      // `titan data prepare` of an older titan leaves: never text to train on.
      TITAN_CHECK(!holds_token_shards(path),
                  "{}: holds token shards (*.tshard) but no {}: an interrupted `titan data prepare`? Prepare it again "
                  "(or name the shards' manifest.json)",
                  input, ShardManifest::kFileName);
      raw_inputs.push_back(input);
    }
  }
  if (!raw_inputs.empty()) {
    TITAN_CHECK(tokenizer != nullptr, "raw corpus input {} needs a tokenizer", raw_inputs.front());
    set_vocabulary(tokenizer->vocab_size(), tokenizer->bos_id(), tokenizer->eos_id(), raw_inputs.front());
    std::vector<std::string> documents;
    for (const auto& file : list_corpus_files(raw_inputs)) {
      for (auto& document : read_corpus_file(file, options.corpus)) documents.push_back(std::move(document));
    }
    std::vector<std::vector<uint32_t>> encoded(documents.size());
    const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16)
    for (size_t d = 0; d < documents.size(); ++d) encoded[d] = tokenizer->encode(documents[d]);
    Part part;
    part.first_document = total_documents_;
    for (const auto& tokens : encoded) {
      part.tokens.insert(part.tokens.end(), tokens.begin(), tokens.end());
      part.ends.push_back(part.tokens.size());
    }
    total_documents_ += part.ends.size();
    total_tokens_ += part.tokens.size();
    parts_.push_back(std::move(part));
  }
  TITAN_CHECK(total_documents_ > 0, "the dataset ({}) has no documents", fmt::join(paths, ", "));
}

std::span<const uint32_t> TokenCorpus::document(uint64_t index) const {
  TITAN_CHECK(index < total_documents_, "document {} of {}", index, total_documents_);
  const auto it = std::upper_bound(parts_.begin(), parts_.end(), index,
                                   [](uint64_t i, const Part& part) { return i < part.first_document; });
  const Part& part = *(it - 1);
  const uint64_t local = index - part.first_document;
  if (part.shard) return part.shard->document(local);
  const uint64_t begin = local == 0 ? 0 : part.ends[local - 1];
  return {part.tokens.data() + begin, static_cast<size_t>(part.ends[local] - begin)};
}

}  // namespace titan::data
