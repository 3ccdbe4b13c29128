// Tokenizer files: tokenizer.json written and read back, a hand-made GPT-2
// style tokenizer.json, tiktoken rank files, and clear errors (naming the file
// and the key or line) on malformed ones.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/peer_support.h"
#include "data/test_text.h"
#include "support/expect_error.h"
#include "titan/core/error.h"
#include "titan/data/base64.h"
#include "titan/data/byte_level_alphabet.h"
#include "titan/data/hf_tokenizer_json.h"
#include "titan/data/tokenizer_loader.h"

namespace titan::data {
namespace tokenizer_files_test {

using json = nlohmann::json;

using titan::testing::expect_error;

// A small GPT-2 style tokenizer.json: 256 byte tokens, merges building " the".
json tiny_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  vocab["Ġt"] = 256;
  vocab["he"] = 257;
  vocab["Ġthe"] = 258;
  vocab["in"] = 259;
  return {
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", 260}, {"content", "<|endoftext|>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"Ġ t", "h e", json::array({"Ġt", "he"}), "i n"})}}}};
}

TEST(TokenizerFiles, HandMadeTokenizerJson) {
  const Tokenizer tokenizer(parse_hf_tokenizer_json(tiny_tokenizer_json().dump(), "tiny.json"));
  EXPECT_EQ(tokenizer.vocab_size(), 261u);
  EXPECT_EQ(tokenizer.eos_id(), 260u);
  // GPT-2's pattern splits "the thin" into "the", " thin"; merges give " the" → 258.
  EXPECT_EQ(tokenizer.encode(" the"), (std::vector<uint32_t>{258}));
  EXPECT_EQ(tokenizer.encode("the in"), (std::vector<uint32_t>{'t', 257, ' ', 259}));
  EXPECT_EQ(tokenizer.encode(" thin"), (std::vector<uint32_t>{256, 'h', 259}));
  EXPECT_EQ(tokenizer.encode("a<|endoftext|>", {.allow_special = true}), (std::vector<uint32_t>{'a', 260}));
}

TEST(TokenizerFiles, WrittenTokenizerJsonReadsBackIdentically) {
  const Tokenizer llama3 = load_builtin_tokenizer("llama3");
  testing::TempDir dir;
  testing::write_bytes(dir / "tokenizer.json", hf_tokenizer_json(llama3));
  const auto reloaded = load_tokenizer((dir / "tokenizer.json").string());
  EXPECT_EQ(reloaded->vocab_size(), llama3.vocab_size());
  EXPECT_EQ(reloaded->bos_id(), llama3.bos_id());
  EXPECT_EQ(reloaded->eos_id(), llama3.eos_id());
  const std::string text = testing::make_test_text({.min_bytes = 60 * 1024, .seed = 41});
  EXPECT_EQ(reloaded->encode(text, {.allow_special = true}), llama3.encode(text, {.allow_special = true}));
}

TEST(TokenizerFiles, TiktokenRankFile) {
  const Tokenizer builtin = load_builtin_tokenizer("cl100k_base");
  std::string ranks;
  for (uint32_t id = 0; id < builtin.model().size(); ++id) {
    ranks += base64_encode(builtin.model().token(id)) + " " + std::to_string(id) + "\n";
  }
  testing::TempDir dir;
  testing::write_bytes(dir / "cl100k_base.tiktoken", ranks);
  testing::write_bytes(dir / "unnamed.model", ranks);  // recognised by its number of ranks
  const std::string text = testing::make_test_text({.min_bytes = 60 * 1024, .seed = 43});
  const auto expected = builtin.encode(text);
  for (const char* file : {"cl100k_base.tiktoken", "unnamed.model"}) {
    const auto loaded = load_tokenizer((dir / file).string());
    EXPECT_EQ(loaded->encode(text), expected) << file;
    EXPECT_EQ(loaded->eos_id(), 100257u);
  }
}

TEST(TokenizerFiles, MalformedTiktokenFiles) {
  testing::TempDir dir;
  auto load = [&](const std::string& name, const std::string& content) {
    testing::write_bytes(dir / name, content);
    return load_tokenizer((dir / name).string());
  };
  expect_error([&] { load("bad.tiktoken", "IQ== 0\nnot*base64 1\n"); }, {"bad.tiktoken:2", "base64"});
  expect_error([&] { load("rank.tiktoken", "IQ== 0\nIg== zero\n"); }, {"rank.tiktoken:2", "rank"});
  expect_error([&] { load("dup.tiktoken", "IQ== 0\nIg== 0\n"); }, {"dup.tiktoken:2", "twice"});
  expect_error([&] { load("fields.tiktoken", "IQ==\n"); }, {"fields.tiktoken:1"});
  expect_error([&] { load("empty.tiktoken", "\n\n"); }, {"empty.tiktoken", "no ranks"});
  // Well-formed, but no known encoding has 2 ranks: its pattern is unknown.
  expect_error([&] { load("custom.tiktoken", "IQ== 0\nIg== 1\n"); }, {"custom.tiktoken", "matches no known encoding"});
  expect_error([&] { load_tokenizer((dir / "missing.json").string()); }, {"missing.json", "no such file"});
  expect_error([&] { load_tokenizer("cl200k_base"); }, {"cl200k_base", "no such file", "o200k_base"});
}

TEST(TokenizerFiles, MalformedTokenizerJson) {
  auto parse = [](const json& j) { return Tokenizer(parse_hf_tokenizer_json(j.dump(), "bad/tokenizer.json")); };
  expect_error([] { parse_hf_tokenizer_json("{\"model\": ", "bad/tokenizer.json"); },
               {"bad/tokenizer.json", "not valid JSON"});
  expect_error([] { parse_hf_tokenizer_json("[1, 2]", "bad/tokenizer.json"); }, {"bad/tokenizer.json", "object"});
  json j = tiny_tokenizer_json();
  j.erase("model");
  expect_error([&] { parse(j); }, {"bad/tokenizer.json", "missing key \"model\""});
  j = tiny_tokenizer_json();
  j["model"]["type"] = "WordPiece";
  expect_error([&] { parse(j); }, {"model.type", "WordPiece"});
  j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("Ġthe zzz");
  expect_error([&] { parse(j); }, {"model.merges[4]", "'zzz' is not in model.vocab"});
  j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("he");
  expect_error([&] { parse(j); }, {"model.merges[4]", "two tokens"});
  j = tiny_tokenizer_json();
  j["model"]["merges"].push_back("he i");
  expect_error([&] { parse(j); }, {"model.merges[4]", "merged token 'hei'"});
  j = tiny_tokenizer_json();
  j["model"]["vocab"]["snow ☃"] = 300;
  expect_error([&] { parse(j); }, {"model.vocab[\"snow ☃\"]", "byte-level"});
  j = tiny_tokenizer_json();
  j["model"]["vocab"]["in"] = "259";
  expect_error([&] { parse(j); }, {"model.vocab[\"in\"]", "integer"});
  j = tiny_tokenizer_json();
  j["model"]["vocab"].erase("A");
  expect_error([&] { parse(j); }, {"bad/tokenizer.json", "single byte 0x41"});
  j = tiny_tokenizer_json();
  j["added_tokens"][0].erase("id");
  expect_error([&] { parse(j); }, {"added_tokens[0]", "missing key \"id\""});
  j = tiny_tokenizer_json();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_error([&] { parse(j); }, {"normalizer.type", "BertNormalizer"});
  j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error([&] { parse(j); }, {"bad/tokenizer.json", "does not compile"});
  j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Punctuation"}};
  expect_error([&] { parse(j); }, {"pre_tokenizer.type", "Punctuation"});
  j = tiny_tokenizer_json();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}})}};
  expect_error([&] { parse(j); }, {"post_processor", "'<s>' is not in added_tokens"});
}

}  // namespace tokenizer_files_test
}  // namespace titan::data
