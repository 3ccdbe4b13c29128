#include "titan/data/hf_tokenizer_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_map>

#include "titan/core/error.h"
#include "titan/data/base64.h"
#include "titan/data/byte_level_alphabet.h"
#include "titan/data/utf8.h"

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
  std::string_view source() const { return source_; }

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

// What a pre_tokenizer asks for: always as general steps; also as the
// byte-level fast path's split patterns when it fits that (`fast`).
struct PreTokenizer {
  std::vector<PreTokenizerStep> steps;
  std::vector<std::string> patterns;
  std::vector<bool> literal;
  bool add_prefix_space = false;
  bool fast = true;
  bool has_byte_level = false, has_metaspace = false, metaspace_first = false;
};

std::shared_ptr<const SplitPattern> compile(const Reader& r, const std::string& pattern, bool literal,
                                            const std::string& key) {
  try {
    return std::make_shared<const SplitPattern>(pattern, r.source(), literal);
  } catch (const Error& e) {
    r.error(key, e.what());
  }
}

// Hugging Face's {"String": ...} or {"Regex": ...} pattern.
std::pair<std::string, bool> read_pattern(const Reader& r, const json& node, const std::string& path) {
  const json& pattern = r.object(r.required(node, "pattern", path), path + ".pattern");
  if (pattern.contains("Regex")) return {r.string(pattern["Regex"], path + ".pattern.Regex"), false};
  if (pattern.contains("String")) {
    std::string literal = r.string(pattern["String"], path + ".pattern.String");
    if (literal.empty()) r.error(path + ".pattern.String", "is empty");
    return {std::move(literal), true};
  }
  r.error(path + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
}

// Rust's char::is_whitespace, as WhitespaceSplit uses it.
constexpr const char* kWhiteSpaceRun =
    R"([\t-\r\x20\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}])";

void read_pre_tokenizer(const Reader& r, const json& node, const std::string& path, PreTokenizer& out) {
  if (node.is_null()) return;
  r.object(node, path);
  const std::string type = r.string(r.required(node, "type", path), path + ".type");
  PreTokenizerStep step;
  step.describe = node.dump();
  if (type == "Sequence") {
    const json& list = r.array(r.required(node, "pretokenizers", path), path + ".pretokenizers");
    for (size_t i = 0; i < list.size(); ++i) {
      read_pre_tokenizer(r, list[i], fmt::format("{}.pretokenizers[{}]", path, i), out);
    }
    return;
  } else if (type == "ByteLevel") {
    // Hugging Face's defaults: add_prefix_space and use_regex are both true.
    out.has_byte_level = true;
    step.kind = PreTokenizerStep::kByteLevel;
    step.add_prefix_space = r.optional_bool(node, "add_prefix_space", true, path);
    if (step.add_prefix_space) {
      if (!out.patterns.empty()) out.fast = false;  // the fast path adds the space to the whole text only
      out.add_prefix_space = true;
    }
    if (r.optional_bool(node, "use_regex", true, path)) {
      step.pattern = compile(r, kGpt2Pattern, false, path + ".use_regex");
      out.patterns.push_back(kGpt2Pattern);
      out.literal.push_back(false);
    }
  } else if (type == "Split") {
    const auto [pattern, literal] = read_pattern(r, node, path);
    const std::string behavior = r.string(r.required(node, "behavior", path), path + ".behavior");
    static const std::vector<std::pair<std::string, PreTokenizerStep::Behavior>> behaviors = {
        {"Removed", PreTokenizerStep::kRemoved},
        {"Isolated", PreTokenizerStep::kIsolated},
        {"MergedWithPrevious", PreTokenizerStep::kMergedWithPrevious},
        {"MergedWithNext", PreTokenizerStep::kMergedWithNext},
        {"Contiguous", PreTokenizerStep::kContiguous}};
    const auto found =
        std::find_if(behaviors.begin(), behaviors.end(), [&](const auto& entry) { return entry.first == behavior; });
    if (found == behaviors.end()) {
      r.error(path + ".behavior",
              fmt::format("'{}' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
                          behavior));
    }
    step.kind = PreTokenizerStep::kSplit;
    step.behavior = found->second;
    step.invert = r.optional_bool(node, "invert", false, path);
    step.pattern = compile(r, pattern, literal, path + ".pattern");
    if (step.behavior != PreTokenizerStep::kIsolated || step.invert) out.fast = false;
    out.patterns.push_back(pattern);
    out.literal.push_back(literal);
  } else if (type == "Digits") {
    const std::string pattern = r.optional_bool(node, "individual_digits", false, path) ? R"(\p{N})" : R"(\p{N}+)";
    step.kind = PreTokenizerStep::kSplit;
    step.pattern = compile(r, pattern, false, path);
    out.patterns.push_back(pattern);
    out.literal.push_back(false);
  } else if (type == "WhitespaceSplit") {
    step.kind = PreTokenizerStep::kSplit;
    step.behavior = PreTokenizerStep::kRemoved;
    step.pattern = compile(r, kWhiteSpaceRun, false, path);
    out.fast = false;
  } else if (type == "Metaspace") {
    out.has_metaspace = true;
    out.fast = false;
    step.kind = PreTokenizerStep::kMetaspace;
    step.replacement = r.string(r.required(node, "replacement", path), path + ".replacement");
    if (step.replacement.empty() || valid_utf8_prefix(step.replacement) != step.replacement.size()) {
      r.error(path + ".replacement", "expected one character");
    }
    const std::string scheme = Reader::member(node, "prepend_scheme").is_null()
                                   ? "always"
                                   : r.string(Reader::member(node, "prepend_scheme"), path + ".prepend_scheme");
    if (scheme == "always") {
      step.prepend = PreTokenizerStep::kAlways;
    } else if (scheme == "first") {
      step.prepend = PreTokenizerStep::kFirst;
      out.metaspace_first = true;
    } else if (scheme == "never") {
      step.prepend = PreTokenizerStep::kNever;
    } else {
      r.error(path + ".prepend_scheme", fmt::format("'{}' is not one of always, first, never", scheme));
    }
    // Older files: add_prefix_space false means "never" (Hugging Face refuses it beside another scheme).
    if (!r.optional_bool(node, "add_prefix_space", true, path)) {
      if (step.prepend != PreTokenizerStep::kNever && !Reader::member(node, "prepend_scheme").is_null()) {
        r.error(path + ".add_prefix_space", "false does not match prepend_scheme");
      }
      step.prepend = PreTokenizerStep::kNever;
    }
    step.split = r.optional_bool(node, "split", true, path);
    step.pattern = compile(r, step.replacement, true, path + ".replacement");
  } else {
    r.error(path + ".type", fmt::format("pre-tokenizer '{}' is not supported (Sequence, ByteLevel, Split, Digits, "
                                        "WhitespaceSplit, Metaspace are)",
                                        type));
  }
  out.steps.push_back(std::move(step));
}

void read_normalizer(const Reader& r, const json& node, const std::string& path, std::vector<NormalizerStep>& out) {
  if (node.is_null()) return;
  r.object(node, path);
  const std::string type = r.string(r.required(node, "type", path), path + ".type");
  if (type == "Sequence") {
    const json& list = r.array(r.required(node, "normalizers", path), path + ".normalizers");
    for (size_t i = 0; i < list.size(); ++i) {
      read_normalizer(r, list[i], fmt::format("{}.normalizers[{}]", path, i), out);
    }
    return;
  }
  NormalizerStep step;
  step.describe = node.dump();
  if (type == "Precompiled") {
    step.kind = NormalizerStep::kPrecompiled;
    const std::string key = path + ".precompiled_charsmap";
    const std::string text = r.string(r.required(node, "precompiled_charsmap", path), key);
    std::string blob;
    if (!base64_decode(text, blob)) r.error(key, "is not base64");
    try {
      step.charsmap = std::make_shared<const PrecompiledCharsmap>(blob, std::string(r.source()) + ": " + key);
    } catch (const Error& e) {
      fail("{}", e.what());
    }
  } else if (type == "Replace") {
    step.kind = NormalizerStep::kReplace;
    const auto [pattern, literal] = read_pattern(r, node, path);
    step.pattern = compile(r, pattern, literal, path + ".pattern");
    step.content = r.string(r.required(node, "content", path), path + ".content");
  } else if (type == "Strip") {
    step.kind = NormalizerStep::kStrip;
    step.strip_left = r.optional_bool(node, "strip_left", false, path);
    step.strip_right = r.optional_bool(node, "strip_right", false, path);
  } else if (type == "Lowercase") {
    step.kind = NormalizerStep::kLowercase;
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    step.kind = type == "NFC"    ? NormalizerStep::kNfc
                : type == "NFD"  ? NormalizerStep::kNfd
                : type == "NFKC" ? NormalizerStep::kNfkc
                                 : NormalizerStep::kNfkd;
  } else if (type == "Prepend") {
    step.kind = NormalizerStep::kPrepend;
    step.content = r.string(r.required(node, "prepend", path), path + ".prepend");
  } else {
    r.error(path + ".type", fmt::format("normalizer '{}' is not supported (Sequence, Precompiled, Replace, Strip, "
                                        "Lowercase, NFC, NFD, NFKC, NFKD, Prepend are)",
                                        type));
  }
  out.push_back(std::move(step));
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
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    // "cls": [text, id] before the sequence, "sep": [text, id] after it (CLIP's <|startoftext|>, <|endoftext|>).
    for (const char* key : {"cls", "sep"}) {
      const std::string key_path = path + "." + key;
      const json& pair = r.array(r.required(node, key, path), key_path);
      if (pair.size() != 2) r.error(key_path, "expected [token, id]");
      (std::string(key) == "cls" ? bos : eos) = r.string(pair[0], key_path + "[0]");
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

// A BPE model's byte-level vocabulary and merges.
BpeModel read_bpe(const Reader& r, const json& model, std::string_view source) {
  if (r.optional_bool(model, "byte_fallback", false, "model")) r.error("model.byte_fallback", "true is not supported");
  const json& prefix = Reader::member(model, "continuing_subword_prefix");
  if (!prefix.is_null() && !(prefix.is_string() && prefix.get<std::string>().empty())) {
    r.error("model.continuing_subword_prefix", "is not supported (only null or \"\")");
  }
  std::string suffix;
  const json& suffix_value = Reader::member(model, "end_of_word_suffix");
  if (!suffix_value.is_null()) suffix = r.string(suffix_value, "model.end_of_word_suffix");
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

  BpeModel bpe = BpeModel::from_merges(std::move(tokens), merges, ignore_merges, source);
  if (!suffix.empty()) {
    std::string suffix_bytes;
    if (!byte_level_to_bytes(suffix, suffix_bytes)) r.error("model.end_of_word_suffix", "is not byte-level text");
    bpe.set_end_of_word_suffix(suffix_bytes, source);
  }
  return bpe;
}

// A Unigram model: "vocab": [[piece, score], ...], "unk_id", "byte_fallback".
UnigramModel read_unigram(const Reader& r, const json& model, std::string_view source) {
  if (r.optional_bool(model, "byte_fallback", false, "model")) r.error("model.byte_fallback", "true is not supported");
  const json& vocab = r.array(r.required(model, "vocab", "model"), "model.vocab");
  if (vocab.empty()) r.error("model.vocab", "is empty");
  if (vocab.size() > static_cast<size_t>(kMaxId) + 1) r.error("model.vocab", "has too many pieces");
  std::vector<std::pair<std::string, double>> pieces;
  pieces.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const std::string key = fmt::format("model.vocab[{}]", i);
    const json& entry = r.array(vocab[i], key);
    if (entry.size() != 2) r.error(key, "expected [piece, score]");
    std::string piece = r.string(entry[0], key + "[0]");
    if (piece.empty()) r.error(key + "[0]", "is an empty piece");
    if (!entry[1].is_number()) r.error(key + "[1]", fmt::format("expected a number, found {}", entry[1].type_name()));
    pieces.emplace_back(std::move(piece), entry[1].get<double>());
  }
  std::optional<uint32_t> unk_id;
  const json& unk = Reader::member(model, "unk_id");
  if (!unk.is_null()) {
    unk_id = r.id(unk, "model.unk_id");
    if (*unk_id >= pieces.size()) {
      r.error("model.unk_id", fmt::format("{} is outside the vocabulary of {} pieces", *unk_id, pieces.size()));
    }
  }
  return UnigramModel(std::move(pieces), unk_id, std::string(source));
}

// The decoder matters only to decode(): Metaspace turns its replacement back into spaces.
void read_decoder(const Reader& r, const json& node, const std::string& path, TokenizerConfig& config) {
  if (!node.is_object()) return;
  const json& type = Reader::member(node, "type");
  if (type == "Sequence") {
    const json& list = Reader::member(node, "decoders");
    if (!list.is_array()) return;
    for (size_t i = 0; i < list.size(); ++i) {
      read_decoder(r, list[i], fmt::format("{}.decoders[{}]", path, i), config);
    }
  } else if (type == "Metaspace") {
    config.metaspace_decoding = r.string(r.required(node, "replacement", path), path + ".replacement");
    const json& scheme = Reader::member(node, "prepend_scheme");
    config.metaspace_strip_first =
        scheme.is_string() ? scheme != "never" : r.optional_bool(node, "add_prefix_space", true, path);
  }
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
  std::vector<NormalizerStep> normalizer;
  read_normalizer(r, Reader::member(root, "normalizer"), "normalizer", normalizer);

  const json& model = r.object(r.required(root, "model", "the top level"), "model");
  const json& type = Reader::member(model, "type");
  const std::string model_type = type.is_null() ? "BPE" : r.string(type, "model.type");
  if (model_type != "BPE" && model_type != "Unigram") {
    r.error("model.type", fmt::format("'{}' is not supported (BPE and Unigram are)", model_type));
  }
  TokenizerConfig config;
  config.name = std::string(source);
  if (model_type == "Unigram") {
    config.unigram = read_unigram(r, model, source);
  } else {
    config.model = read_bpe(r, model, source);
  }

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
  read_decoder(r, Reader::member(root, "decoder"), "decoder", config);

  // The byte-level fast path when nothing else is asked for; the general pipeline otherwise.
  const bool general = !normalizer.empty() || config.unigram || !pre.fast || !config.model.end_of_word_suffix().empty();
  if (general) {
    if (config.unigram && pre.has_byte_level) {
      r.error("pre_tokenizer", "ByteLevel with a Unigram model is not supported");
    }
    if (pre.metaspace_first && !normalizer.empty()) {
      // Hugging Face decides "first" by offsets into the original text, which a normalizer moves.
      r.error("pre_tokenizer.prepend_scheme", "'first' together with a normalizer is not supported");
    }
    config.pipeline = std::move(pre.steps);
    config.normalizer = TextNormalizer(std::move(normalizer));
    config.split_patterns.clear();
    config.literal_patterns.clear();
    config.add_prefix_space = false;
  }
  return config;
}

std::string hf_tokenizer_json(const Tokenizer& tokenizer) {
  TITAN_CHECK(!tokenizer.general_pipeline(),
              "tokenizer {}: writing tokenizer.json supports byte-level BPE without a normalizer only",
              tokenizer.name());
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
