#include "titan/data/tokenizer_loader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>

#include "titan/core/error.h"
#include "titan/core/share_dir.h"
#include "titan/data/base64.h"
#include "titan/data/byte_level_alphabet.h"
#include "titan/data/file_io.h"
#include "titan/data/hf_tokenizer_json.h"
#include "titan/data/tiktoken_ranks.h"

namespace titan::data {
namespace {

using json = nlohmann::json;

// The split patterns of OpenAI's encodings (tiktoken_ext/openai_public.py)
// and of Llama 3 (Meta's tokenizer.py, the same text as cl100k_base's).
constexpr const char* kR50kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct KnownEncoding {
  const char* name;
  const char* pattern;
  size_t ranks;  // number of mergeable ranks, which identifies an unnamed rank file
  std::vector<SpecialToken> specials;
  const char* bos;
  const char* eos;
};

std::vector<SpecialToken> llama3_specials() {
  // Meta's tokenizer.py: 256 reserved ids after the 128000 ranks, these first.
  std::vector<std::string> names = {"<|begin_of_text|>",
                                    "<|end_of_text|>",
                                    "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>",
                                    "<|finetune_right_pad_id|>",
                                    "<|reserved_special_token_2|>",
                                    "<|start_header_id|>",
                                    "<|end_header_id|>",
                                    "<|eom_id|>",
                                    "<|eot_id|>",
                                    "<|python_tag|>"};
  for (int i = 3; names.size() < 256; ++i) names.push_back(fmt::format("<|reserved_special_token_{}|>", i));
  std::vector<SpecialToken> specials;
  for (size_t i = 0; i < names.size(); ++i) specials.push_back({names[i], static_cast<uint32_t>(128000 + i), true});
  return specials;
}

const std::vector<KnownEncoding>& known_encodings() {
  static const std::vector<KnownEncoding> encodings = {
      {"cl100k_base",
       kCl100kPattern,
       100256,
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}},
       nullptr,
       "<|endoftext|>"},
      {"o200k_base",
       kO200kPattern,
       199998,
       {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}},
       nullptr,
       "<|endoftext|>"},
      {"p50k_base", kR50kPattern, 50280, {{"<|endoftext|>", 50256}}, nullptr, "<|endoftext|>"},
      {"r50k_base", kR50kPattern, 50256, {{"<|endoftext|>", 50256}}, nullptr, "<|endoftext|>"},
      {"llama3", kCl100kPattern, 128000, llama3_specials(), "<|begin_of_text|>", "<|end_of_text|>"},
  };
  return encodings;
}

const KnownEncoding* find_encoding(std::string_view name) {
  for (const auto& encoding : known_encodings()) {
    if (name == encoding.name) return &encoding;
  }
  return nullptr;
}

std::optional<uint32_t> id_of(const std::vector<SpecialToken>& specials, const char* text) {
  if (text == nullptr) return std::nullopt;
  for (const auto& special : specials) {
    if (special.text == text) return special.id;
  }
  return std::nullopt;
}

Tokenizer make_tiktoken_tokenizer(std::string name, std::vector<std::string> ranks, std::string pattern,
                                  std::vector<SpecialToken> specials, const char* bos, const char* eos) {
  TokenizerConfig config;
  config.bos = id_of(specials, bos);
  config.eos = id_of(specials, eos);
  config.model = BpeModel::from_ranks(std::move(ranks), name);
  config.name = std::move(name);
  config.split_patterns = {std::move(pattern)};
  config.literal_patterns = {false};
  config.specials = std::move(specials);
  return Tokenizer(std::move(config));
}

// The npm tiktoken package's encoders/<name>.json: pat_str, special_tokens and
// packed bpe_ranks.
Tokenizer load_tiktoken_npm_json(const json& root, const std::string& source, const std::string& name,
                                 const KnownEncoding* known) {
  auto member = [&](const char* key) -> const json& {
    const auto it = root.find(key);
    TITAN_CHECK(it != root.end(), "{}: missing key \"{}\"", source, key);
    return *it;
  };
  const json& ranks = member("bpe_ranks");
  const json& pattern = member("pat_str");
  const json& specials_json = member("special_tokens");
  TITAN_CHECK(ranks.is_string(), "{}: bpe_ranks: expected a string", source);
  TITAN_CHECK(pattern.is_string(), "{}: pat_str: expected a string", source);
  TITAN_CHECK(specials_json.is_object(), "{}: special_tokens: expected an object", source);
  std::vector<SpecialToken> specials;
  for (const auto& [text, id] : specials_json.items()) {
    TITAN_CHECK(id.is_number_unsigned() && id.get<uint64_t>() < (1u << 24), "{}: special_tokens[\"{}\"]: bad id",
                source, text);
    TITAN_CHECK(!text.empty(), "{}: special_tokens: empty token text", source);
    specials.push_back({text, static_cast<uint32_t>(id.get<uint64_t>()), true});
  }
  std::sort(specials.begin(), specials.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return make_tiktoken_tokenizer(name, parse_tiktoken_packed_ranks(ranks.get_ref<const std::string&>(), source),
                                 pattern.get<std::string>(), std::move(specials), known ? known->bos : nullptr,
                                 known ? known->eos : "<|endoftext|>");
}

// The string literal assigned to `const <name> = "..."` in a JavaScript file.
std::string_view js_string_constant(std::string_view js, std::string_view name, const std::string& source) {
  const std::string marker = fmt::format("const {} = \"", name);
  const size_t start = js.find(marker);
  TITAN_CHECK(start != std::string_view::npos, "{}: no constant {} (a different llama3-tokenizer-js version?)", source,
              name);
  const size_t begin = start + marker.size();
  const size_t end = js.find('"', begin);
  TITAN_CHECK(end != std::string_view::npos, "{}: constant {} is not terminated", source, name);
  return js.substr(begin, end - begin);
}

// llama3-tokenizer-js keeps the Llama 3 tokenizer.json's vocabulary (byte-level
// strings, one per line, base64) and its merges (pairs of 17-bit vocabulary
// indices, packed big-endian, base64) in src/data-converted.js.
Tokenizer load_llama3_js(const std::filesystem::path& file) {
  const std::string source = file.string();
  const std::string js = read_file(file, "llama3-tokenizer-js data");
  std::string vocab_text, merge_bits;
  TITAN_CHECK(base64_decode(js_string_constant(js, "llama_vocab_base64", source), vocab_text),
              "{}: llama_vocab_base64 is not base64", source);
  TITAN_CHECK(base64_decode(js_string_constant(js, "llama_merges_binary", source), merge_bits),
              "{}: llama_merges_binary is not base64", source);
  std::vector<std::string> tokens;
  size_t start = 0;
  while (start <= vocab_text.size()) {
    const size_t newline = std::min(vocab_text.find('\n', start), vocab_text.size());
    std::string bytes;
    TITAN_CHECK(byte_level_to_bytes(std::string_view(vocab_text).substr(start, newline - start), bytes),
                "{}: vocabulary entry {} is not byte-level text", source, tokens.size());
    tokens.push_back(std::move(bytes));
    start = newline + 1;
  }
  TITAN_CHECK(tokens.size() == 128000, "{}: expected 128000 vocabulary entries, found {}", source, tokens.size());
  const size_t count = merge_bits.size() * 8 / 17;
  TITAN_CHECK(count % 2 == 0, "{}: odd number of merge indices", source);
  auto bit = [&](size_t i) { return (static_cast<uint8_t>(merge_bits[i / 8]) >> (7 - i % 8)) & 1u; };
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  merges.reserve(count / 2);
  uint32_t pending = 0;
  for (size_t k = 0; k < count; ++k) {
    uint32_t index = 0;
    for (size_t i = 17 * k; i < 17 * k + 17; ++i) index = (index << 1) | bit(i);
    TITAN_CHECK(index < tokens.size(), "{}: merge index {} is outside the vocabulary", source, index);
    if (k % 2 == 0) {
      pending = index;
    } else {
      merges.emplace_back(pending, index);
    }
  }
  const KnownEncoding& llama3 = *find_encoding("llama3");
  TokenizerConfig config;
  config.name = "llama3";
  // Llama 3's tokenizer.json sets ignore_merges: a piece that is a token is that token.
  config.model = BpeModel::from_merges(std::move(tokens), merges, /*ignore_merges=*/true, source);
  config.split_patterns = {llama3.pattern};
  config.literal_patterns = {false};
  config.specials = llama3.specials;
  config.bos = id_of(config.specials, llama3.bos);
  config.eos = id_of(config.specials, llama3.eos);
  return Tokenizer(std::move(config));
}

}  // namespace

const std::vector<std::string>& builtin_tokenizer_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> list;
    for (const auto& encoding : known_encodings()) list.push_back(encoding.name);
    return list;
  }();
  return names;
}

std::optional<std::filesystem::path> builtin_tokenizer_file(std::string_view name) {
  const KnownEncoding* known = find_encoding(name);
  const auto share = share_dir();
  if (known == nullptr || !share) return std::nullopt;
  // llama3 keeps llama3-tokenizer-js's data file; the others tiktoken's npm encoder JSON.
  return *share / "tokenizers" / (std::string(name) + (name == "llama3" ? ".js" : ".json"));
}

Tokenizer load_builtin_tokenizer(std::string_view name) {
  const KnownEncoding* known = find_encoding(name);
  TITAN_CHECK(known != nullptr, "unknown built-in tokenizer '{}' (known: {})", name,
              fmt::join(builtin_tokenizer_names(), ", "));
  const auto file = builtin_tokenizer_file(name);
  std::error_code error;
  TITAN_CHECK(file.has_value() && std::filesystem::exists(*file, error),
              "built-in tokenizer '{}' is not installed{}: {}", name,
              file ? fmt::format(" ({} is missing)", file->string()) : std::string(), share_dir_help());
  if (name == "llama3") return load_llama3_js(*file);
  json root;
  try {
    root = json::parse(read_file(*file, "tokenizer"));
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", file->string(), e.what());
  }
  TITAN_CHECK(root.is_object(), "{}: expected a JSON object", file->string());
  return load_tiktoken_npm_json(root, file->string(), std::string(name), known);
}

Tokenizer load_tiktoken_file(const std::filesystem::path& path) {
  const std::string source = path.string();
  std::vector<std::string> ranks = parse_tiktoken_ranks(read_file(path, "tokenizer"), source);
  // Recognise the encoding: by file name (cl100k_base.tiktoken), else by size
  // (Meta's tokenizer.model has Llama 3's 128000 ranks).
  const std::string stem = path.stem().string();
  const KnownEncoding* known = find_encoding(stem);
  if (known == nullptr) {
    for (const auto& encoding : known_encodings()) {
      if (encoding.ranks == ranks.size()) known = &encoding;
    }
  }
  TITAN_CHECK(known != nullptr,
              "{}: a tiktoken rank file with {} ranks that matches no known encoding, so its split pattern and special "
              "tokens are unknown; name the file after its encoding ({}) or convert it to tokenizer.json",
              source, ranks.size(), fmt::join(builtin_tokenizer_names(), ", "));
  TITAN_CHECK(ranks.size() <= known->ranks,
              "{}: {} ranks, more than encoding {} has ({}): its special token ids would collide", source, ranks.size(),
              known->name, known->ranks);
  return make_tiktoken_tokenizer(source, std::move(ranks), known->pattern, known->specials, known->bos, known->eos);
}

Tokenizer load_hf_tokenizer_file(const std::filesystem::path& path) {
  return Tokenizer(parse_hf_tokenizer_json(read_file(path, "tokenizer"), path.string()));
}

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& spec) {
  TITAN_CHECK(!spec.empty(), "no tokenizer given (a tokenizer.json, a tiktoken rank file or one of: {})",
              fmt::join(builtin_tokenizer_names(), ", "));
  std::error_code error;
  const bool exists = std::filesystem::exists(spec, error);
  if (!exists && find_encoding(spec) != nullptr) return std::make_shared<const Tokenizer>(load_builtin_tokenizer(spec));
  TITAN_CHECK(exists, "tokenizer {}: no such file, and not a built-in name ({})", spec,
              fmt::join(builtin_tokenizer_names(), ", "));
  const std::string content = read_file(spec, "tokenizer");
  const size_t first = content.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && content[first] == '{') {
    // JSON: Hugging Face's tokenizer.json, or an npm tiktoken encoder file.
    json root;
    try {
      root = json::parse(content);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", spec, e.what());
    }
    if (root.is_object() && root.contains("bpe_ranks")) {
      return std::make_shared<const Tokenizer>(
          load_tiktoken_npm_json(root, spec, spec, find_encoding(std::filesystem::path(spec).stem().string())));
    }
    return std::make_shared<const Tokenizer>(parse_hf_tokenizer_json(content, spec));
  }
  return std::make_shared<const Tokenizer>(load_tiktoken_file(spec));
}

}  // namespace titan::data
