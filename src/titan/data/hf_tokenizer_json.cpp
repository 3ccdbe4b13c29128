#include "titan/data/hf_tokenizer_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_map>

#include "titan/core/error.h"
#include "titan/data/byte_level_alphabet.h"

namespace titan::data {
namespace {

using json = nlohmann::json;

// GPT-2's pattern: what a ByteLevel pre-tokenizer with use_regex splits by.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Ids index vectors: refuse ids that would make them huge.
constexpr int64_t kMaxId = (1 << 24) - 1;

class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  [[noreturn]] void error(const std::string& key, const std::string& message) const {
    fail("{}: {}: {}", source_, key, message);
  }
  const json& object(const json& value, const std::string& key) const {
    if (!value.is_object()) error(key, fmt::format("expected an object, found {}", value.type_name()));
    return value;
  }
  const json& array(const json& value, const std::string& key) const {
    if (!value.is_array()) error(key, fmt::format("expected an array, found {}", value.type_name()));
    return value;
  }
  std::string string(const json& value, const std::string& key) const {
    if (!value.is_string()) error(key, fmt::format("expected a string, found {}", value.type_name()));
    return value.get<std::string>();
  }
  bool boolean(const json& value, const std::string& key) const {
    if (!value.is_boolean()) error(key, fmt::format("expected true or false, found {}", value.type_name()));
    return value.get<bool>();
  }
  uint32_t id(const json& value, const std::string& key) const {
    if (!value.is_number_integer())
      error(key, fmt::format("expected an integer token id, found {}", value.type_name()));
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id > kMaxId) error(key, fmt::format("token id {} is out of range [0, {}]", id, kMaxId));
    return static_cast<uint32_t>(id);
  }
  // Member `key` of object `value` (at path `path`), or null when absent.
  static const json& member(const json& value, const char* key) {
    static const json null_value;
    const auto it = value.find(key);
    return it == value.end() ? null_value : *it;
  }
  const json& required(const json& value, const char* key, const std::string& path) const {
    const auto it = value.find(key);
    if (it == value.end()) error(path, fmt::format("missing key \"{}\"", key));
    return *it;
  }
  bool optional_bool(const json& value, const char* key, bool fallback, const std::string& path) const {
    const json& member_value = member(value, key);
    return member_value.is_null() ? fallback : boolean(member_value, path + "." + key);
  }

 private:
  std::string_view source_;
};

struct PreTokenizer {
  std::vector<std::string> patterns;
  std::vector<bool> literal;
  bool add_prefix_space = false;
};

void read_pre_tokenizer(const Reader& r, const json& node, const std::string& path, PreTokenizer& out) {
  if (node.is_null()) return;
  r.object(node, path);
  const std::string type = r.string(r.required(node, "type", path), path + ".type");
  if (type == "Sequence") {
    const json& list = r.array(r.required(node, "pretokenizers", path), path + ".pretokenizers");
    for (size_t i = 0; i < list.size(); ++i) {
      read_pre_tokenizer(r, list[i], fmt::format("{}.pretokenizers[{}]", path, i), out);
    }
  } else if (type == "ByteLevel") {
    // Hugging Face's defaults: add_prefix_space and use_regex are both true.
    if (r.optional_bool(node, "add_prefix_space", true, path)) {
      if (!out.patterns.empty()) r.error(path + ".add_prefix_space", "is only supported on the first pre-tokenizer");
      out.add_prefix_space = true;
    }
    if (r.optional_bool(node, "use_regex", true, path)) {
      out.patterns.push_back(kGpt2Pattern);
      out.literal.push_back(false);
    }
  } else if (type == "Split") {
    const json& pattern = r.object(r.required(node, "pattern", path), path + ".pattern");
    const std::string behavior = r.string(r.required(node, "behavior", path), path + ".behavior");
    if (behavior != "Isolated") {
      r.error(path + ".behavior", fmt::format("'{}' is not supported (only Isolated)", behavior));
    }
    if (r.optional_bool(node, "invert", false, path)) r.error(path + ".invert", "true is not supported");
    if (pattern.contains("Regex")) {
      out.patterns.push_back(r.string(pattern["Regex"], path + ".pattern.Regex"));
      out.literal.push_back(false);
    } else if (pattern.contains("String")) {
      const std::string literal = r.string(pattern["String"], path + ".pattern.String");
      if (literal.empty()) r.error(path + ".pattern.String", "is empty");
      out.patterns.push_back(literal);
      out.literal.push_back(true);
    } else {
      r.error(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    }
  } else if (type == "Digits") {
    out.patterns.push_back(r.optional_bool(node, "individual_digits", false, path) ? R"(\p{N})" : R"(\p{N}+)");
    out.literal.push_back(false);
  } else {
    r.error(path + ".type",
            fmt::format("pre-tokenizer '{}' is not supported (Sequence, ByteLevel, Split, Digits are)", type));
  }
}

void read_normalizer(const Reader& r, const json& node, const std::string& path) {
  if (node.is_null()) return;
  r.object(node, path);
  const std::string type = r.string(r.required(node, "type", path), path + ".type");
  if (type == "Sequence") {
    const json& list = r.array(r.required(node, "normalizers", path), path + ".normalizers");
    for (size_t i = 0; i < list.size(); ++i) read_normalizer(r, list[i], fmt::format("{}.normalizers[{}]", path, i));
    return;
  }
  r.error(path + ".type", fmt::format("normalizer '{}' is not supported: titan tokenizes the text as given", type));
}

// The BOS/EOS a TemplateProcessing post-processor wraps a single sequence in.
void read_post_processor(const Reader& r, const json& node, const std::string& path, std::optional<std::string>& bos,
                         std::optional<std::string>& eos) {
  if (node.is_null() || !node.is_object()) return;
  const json& type = Reader::member(node, "type");
  if (!type.is_string()) return;
  if (type == "Sequence") {
    const json& list = Reader::member(node, "processors");
    if (!list.is_array()) return;
    for (size_t i = 0; i < list.size(); ++i) {
      read_post_processor(r, list[i], fmt::format("{}.processors[{}]", path, i), bos, eos);
    }
    return;
  }
  if (type != "TemplateProcessing") return;
  const json& single = r.array(r.required(node, "single", path), path + ".single");
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string item_path = fmt::format("{}.single[{}]", path, i);
    const json& item = r.object(single[i], item_path);
    if (item.contains("Sequence")) {
      seen_sequence = true;
    } else if (item.contains("SpecialToken")) {
      const json& special = r.object(item["SpecialToken"], item_path + ".SpecialToken");
      const std::string text =
          r.string(r.required(special, "id", item_path + ".SpecialToken"), item_path + ".SpecialToken.id");
      (seen_sequence ? eos : bos) = text;
    }
  }
}

std::string token_bytes(const Reader& r, const std::string& text, const std::string& key) {
  std::string bytes;
  if (!byte_level_to_bytes(text, bytes)) {
    r.error(key, "is not written in the byte-level alphabet (only byte-level BPE tokenizers are supported)");
  }
  if (bytes.empty()) r.error(key, "is an empty token");
  return bytes;
}

}  // namespace

TokenizerConfig parse_hf_tokenizer_json(std::string_view content, std::string_view source) {
  json root;
  try {
    root = json::parse(content.begin(), content.end());
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  const Reader r(source);
  r.object(root, "the top level");
  read_normalizer(r, Reader::member(root, "normalizer"), "normalizer");

  const json& model = r.object(r.required(root, "model", "the top level"), "model");
  const json& type = Reader::member(model, "type");
  if (!type.is_null() && r.string(type, "model.type") != "BPE") {
    r.error("model.type", fmt::format("'{}' is not supported (only BPE)", type.get<std::string>()));
  }
  if (r.optional_bool(model, "byte_fallback", false, "model")) r.error("model.byte_fallback", "true is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json& value = Reader::member(model, key);
    if (!value.is_null() && !(value.is_string() && value.get<std::string>().empty())) {
      r.error(std::string("model.") + key, "is not supported by byte-level BPE");
    }
  }
  const bool ignore_merges = r.optional_bool(model, "ignore_merges", false, "model");

  // Vocabulary: byte-level strings -> ids.
  const json& vocab = r.object(r.required(model, "vocab", "model"), "model.vocab");
  std::vector<std::string> tokens;
  std::unordered_map<std::string, uint32_t> id_of;  // byte-level text -> id
  id_of.reserve(vocab.size());
  for (const auto& [text, id_value] : vocab.items()) {
    const std::string key = fmt::format("model.vocab[\"{}\"]", text);
    const uint32_t id = r.id(id_value, key);
    if (id >= tokens.size()) tokens.resize(id + 1);
    if (!tokens[id].empty()) r.error(key, fmt::format("id {} is used twice", id));
    tokens[id] = token_bytes(r, text, key);
    id_of.emplace(text, id);
  }
  if (tokens.empty()) r.error("model.vocab", "is empty");

  // Merges: "left right" strings (older files) or ["left", "right"] pairs.
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  const json& merge_list = r.array(r.required(model, "merges", "model"), "model.merges");
  merges.reserve(merge_list.size());
  for (size_t i = 0; i < merge_list.size(); ++i) {
    const std::string key = fmt::format("model.merges[{}]", i);
    std::string left, right;
    const json& merge = merge_list[i];
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        r.error(key, fmt::format("'{}' is not two tokens separated by one space", text));
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      left = r.string(merge[0], key + "[0]");
      right = r.string(merge[1], key + "[1]");
    } else {
      r.error(key, "expected \"left right\" or [\"left\", \"right\"]");
    }
    const auto left_id = id_of.find(left), right_id = id_of.find(right);
    if (left_id == id_of.end()) r.error(key, fmt::format("token '{}' is not in model.vocab", left));
    if (right_id == id_of.end()) r.error(key, fmt::format("token '{}' is not in model.vocab", right));
    if (id_of.find(left + right) == id_of.end()) {
      r.error(key, fmt::format("the merged token '{}' is not in model.vocab", left + right));
    }
    merges.emplace_back(left_id->second, right_id->second);
  }

  TokenizerConfig config;
  config.name = std::string(source);

  // Added tokens: matched as wholes before pre-tokenization.
  const json& added = Reader::member(root, "added_tokens");
  if (!added.is_null()) {
    r.array(added, "added_tokens");
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string key = fmt::format("added_tokens[{}]", i);
      const json& token = r.object(added[i], key);
      SpecialToken special;
      special.id = r.id(r.required(token, "id", key), key + ".id");
      special.text = r.string(r.required(token, "content", key), key + ".content");
      if (special.text.empty()) r.error(key + ".content", "is empty");
      special.special = r.optional_bool(token, "special", false, key);
      for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
        if (r.optional_bool(token, flag, false, key)) {
          r.error(key + "." + flag, "true is not supported");
        }
      }
      config.specials.push_back(std::move(special));
    }
  }

  PreTokenizer pre;
  read_pre_tokenizer(r, Reader::member(root, "pre_tokenizer"), "pre_tokenizer", pre);
  config.split_patterns = std::move(pre.patterns);
  config.literal_patterns = std::move(pre.literal);
  config.add_prefix_space = pre.add_prefix_space;

  std::optional<std::string> bos_text, eos_text;
  read_post_processor(r, Reader::member(root, "post_processor"), "post_processor", bos_text, eos_text);
  auto id_of_added = [&](const std::string& text) -> std::optional<uint32_t> {
    for (const auto& special : config.specials) {
      if (special.text == text) return special.id;
    }
    return std::nullopt;
  };
  auto first_present = [&](std::initializer_list<const char*> names) -> std::optional<uint32_t> {
    for (const char* name : names) {
      if (auto id = id_of_added(name)) return id;
    }
    return std::nullopt;
  };
  if (bos_text) {
    config.bos = id_of_added(*bos_text);
    if (!config.bos) r.error("post_processor", fmt::format("BOS token '{}' is not in added_tokens", *bos_text));
  } else {
    config.bos = first_present({"<|begin_of_text|>", "<s>", "<|startoftext|>", "<bos>"});
  }
  if (eos_text) {
    config.eos = id_of_added(*eos_text);
    if (!config.eos) r.error("post_processor", fmt::format("EOS token '{}' is not in added_tokens", *eos_text));
  } else {
    config.eos = first_present({"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"});
  }
  config.model = BpeModel::from_merges(std::move(tokens), merges, ignore_merges, source);
  return config;
}

std::string hf_tokenizer_json(const Tokenizer& tokenizer) {
  TITAN_CHECK(tokenizer.split_patterns().size() <= 1, "tokenizer {}: writing tokenizer.json supports one split pattern",
              tokenizer.name());
  using ordered = nlohmann::ordered_json;
  const BpeModel& model = tokenizer.model();
  ordered root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  ordered added = ordered::array();
  for (const auto& special : tokenizer.special_tokens()) {
    added.push_back({{"id", special.id},
                     {"content", special.text},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special.special}});
  }
  root["added_tokens"] = added;
  root["normalizer"] = nullptr;
  ordered pre = ordered::array();
  for (const auto& pattern : tokenizer.split_patterns()) {
    pre.push_back({{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}});
  }
  pre.push_back({{"type", "ByteLevel"},
                 {"add_prefix_space", tokenizer.add_prefix_space()},
                 {"trim_offsets", true},
                 {"use_regex", false}});
  root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", pre}};
  if (auto bos = tokenizer.bos_id()) {
    const std::string text(tokenizer.token_bytes(*bos));
    ordered single = ordered::array();
    single.push_back({{"SpecialToken", {{"id", text}, {"type_id", 0}}}});
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    ordered pair = single;
    pair.push_back({{"SpecialToken", {{"id", text}, {"type_id", 1}}}});
    pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
    root["post_processor"] = {{"type", "TemplateProcessing"},
                              {"single", single},
                              {"pair", pair},
                              {"special_tokens", {{text, {{"id", text}, {"ids", {*bos}}, {"tokens", {text}}}}}}};
  } else {
    root["post_processor"] = nullptr;
  }
  root["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  // The vocabulary is written by hand, in id order: ordered_json's object
  // inserts are linear searches, quadratic over a 128K-token vocabulary.
  constexpr const char* kVocabPlaceholder = "@@titan-vocab@@";
  std::string vocab = "{";
  for (uint32_t id = 0; id < model.size(); ++id) {
    if (!model.has(id)) continue;
    if (vocab.size() > 1) vocab += ",\n   ";
    vocab += ordered(bytes_to_byte_level(model.token(id))).dump() + ": " + std::to_string(id);
  }
  vocab += "}";
  ordered merges = ordered::array();
  for (const auto& [left, right] : model.merges_in_rank_order()) {
    merges.push_back(bytes_to_byte_level(model.token(left)) + " " + bytes_to_byte_level(model.token(right)));
  }
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", model.ignore_merges()},
                   {"vocab", kVocabPlaceholder},
                   {"merges", merges}};
  std::string text = root.dump(1) + "\n";
  const std::string placeholder = ordered(kVocabPlaceholder).dump();
  text.replace(text.find(placeholder), placeholder.size(), vocab);
  return text;
}

}  // namespace titan::data
