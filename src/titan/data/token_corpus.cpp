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
  if (const auto chat = root.find("chat"); chat != root.end()) {
    TITAN_CHECK(chat->is_boolean(), "{}: \"chat\" must be true or false", source);
    manifest.chat = chat->get<bool>();
  }
  if (manifest.chat) {
    manifest.chat_template = root.value("chat_template", std::string());
    manifest.train_on = root.value("train_on", std::string(chat_train_on_name(ChatTrainOn::assistant)));
    parse_chat_train_on(manifest.train_on, source + ": \"train_on\"");
  }
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
  if (manifest.chat) {  // only chat manifests carry these: others stay as older titans wrote them
    root["chat"] = true;
    root["chat_template"] = manifest.chat_template;
    root["train_on"] = manifest.train_on;
  }
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

void TokenCorpus::add_shard(const fs::path& path, const Options& options) {
  Part part;
  part.shard = std::make_unique<MappedShard>(path, options.verify_checksums);
  const MappedShard& shard = *part.shard;
  if (!options.chat) {
    TITAN_CHECK(!shard.has_loss_mask(),
                "{}: a chat token shard (it carries loss masks, from `titan data prepare --chat`), but chat.enable is "
                "off: set chat.enable = true to train on it as chat data",
                path.string());
    total_tokens_ += shard.num_tokens();
  } else {
    TITAN_CHECK(shard.has_loss_mask(),
                "{}: a token shard without loss masks, but chat.enable is on: prepare chat data with `titan data "
                "prepare --chat`, or turn chat.enable off",
                path.string());
    // The overlong policy applies to prepared conversations too (they may
    // have been prepared for longer rows): a view of the kept documents,
    // built only when it leaves something out.
    bool changed = false;
    for (uint64_t d = 0; d < shard.num_documents(); ++d) {
      const auto mask = shard.loss_mask(d);
      const auto length = chat_kept_length(mask, options.chat->max_tokens, options.chat->overlong);
      if (!length) {
        ++chat_stats_.dropped;
        changed = true;
        continue;
      }
      if (*length < mask.size()) {
        ++chat_stats_.truncated;
        changed = true;
      }
      part.kept.push_back(d);
      part.kept_length.push_back(*length);
      ++chat_stats_.conversations;
      chat_stats_.tokens += *length;
      chat_stats_.trained_tokens += static_cast<uint64_t>(std::count(mask.begin(), mask.begin() + *length, 1));
      total_tokens_ += *length;
    }
    part.viewed = changed;
    if (!changed) {
      part.kept = {};
      part.kept_length = {};
    }
  }
  part.first_document = total_documents_;
  total_documents_ += part.num_documents();
  parts_.push_back(std::move(part));
}

TokenCorpus::TokenCorpus(const std::vector<std::string>& paths, const Options& options) {
  TITAN_CHECK(!paths.empty(), "no dataset paths given");
  chat_ = options.chat.has_value();
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
      TITAN_CHECK(!manifest.chat || chat_,
                  "{}: chat shards (from `titan data prepare --chat`), but chat.enable is off: set chat.enable = true "
                  "to train on them as chat data",
                  manifest_path.string());
      TITAN_CHECK(manifest.chat || !chat_,
                  "{}: the shards are not chat data (no loss masks), but chat.enable is on: prepare chat data with "
                  "`titan data prepare --chat`, or turn chat.enable off",
                  manifest_path.string());
      if (chat_) {
        const char* wanted = chat_train_on_name(options.chat->train_on);
        TITAN_CHECK(manifest.train_on == wanted,
                    "{}: the chat shards train on {} tokens (prepared with --train-on {}), but chat.train_on is {}: "
                    "set chat.train_on = \"{}\", or prepare the data again",
                    manifest_path.string(), manifest.train_on, manifest.train_on, wanted, manifest.train_on);
      }
      set_vocabulary(manifest.vocab_size, manifest.bos, manifest.eos, manifest_path.string());
      for (const auto& shard : manifest.shards) add_shard(manifest_path.parent_path() / shard, options);
    } else if (path.extension() == ".tshard") {
      TITAN_CHECK(tokenizer != nullptr,
                  "{}: a bare shard needs a tokenizer (for BOS/EOS); pass one or its folder's "
                  "manifest.json",
                  input);
      add_shard(path, options);
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
    if (chat_) {
      const auto chat_template = resolve_chat_template(options.chat->chat_template, options.tokenizer, "chat.template");
      ChatStats stats;
      auto conversations = tokenize_chat_files(list_corpus_files(raw_inputs), *tokenizer, *chat_template, *options.chat,
                                               options.threads, &stats);
      Part part;
      part.first_document = total_documents_;
      for (const auto& conversation : conversations) {
        part.tokens.insert(part.tokens.end(), conversation.tokens.begin(), conversation.tokens.end());
        part.mask.insert(part.mask.end(), conversation.mask.begin(), conversation.mask.end());
        part.ends.push_back(part.tokens.size());
      }
      chat_stats_.conversations += stats.conversations;
      chat_stats_.tokens += stats.tokens;
      chat_stats_.trained_tokens += stats.trained_tokens;
      chat_stats_.truncated += stats.truncated;
      chat_stats_.dropped += stats.dropped;
      total_documents_ += part.ends.size();
      total_tokens_ += part.tokens.size();
      parts_.push_back(std::move(part));
      raw_inputs.clear();
    }
  }
  if (!raw_inputs.empty()) {
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
  TITAN_CHECK(total_documents_ > 0, "the dataset ({}) has no documents{}", fmt::join(paths, ", "),
              chat_stats_.dropped > 0 ? fmt::format(" ({} conversations dropped as longer than {} tokens)",
                                                    chat_stats_.dropped, options.chat->max_tokens)
                                      : std::string());
}

const TokenCorpus::Part& TokenCorpus::part_of(uint64_t index, uint64_t* local) const {
  TITAN_CHECK(index < total_documents_, "document {} of {}", index, total_documents_);
  const auto it = std::upper_bound(parts_.begin(), parts_.end(), index,
                                   [](uint64_t i, const Part& part) { return i < part.first_document; });
  const Part& part = *(it - 1);
  *local = index - part.first_document;
  return part;
}

std::span<const uint32_t> TokenCorpus::document(uint64_t index) const {
  uint64_t local = 0;
  const Part& part = part_of(index, &local);
  if (part.shard) {
    if (part.viewed) return part.shard->document(part.kept[local]).first(part.kept_length[local]);
    return part.shard->document(local);
  }
  const uint64_t begin = local == 0 ? 0 : part.ends[local - 1];
  return {part.tokens.data() + begin, static_cast<size_t>(part.ends[local] - begin)};
}

std::span<const uint8_t> TokenCorpus::loss_mask(uint64_t index) const {
  if (!chat_) return {};
  uint64_t local = 0;
  const Part& part = part_of(index, &local);
  if (part.shard) {
    if (part.viewed) return part.shard->loss_mask(part.kept[local]).first(part.kept_length[local]);
    return part.shard->loss_mask(local);
  }
  const uint64_t begin = local == 0 ? 0 : part.ends[local - 1];
  return {part.mask.data() + begin, static_cast<size_t>(part.ends[local] - begin)};
}

}  // namespace titan::data
