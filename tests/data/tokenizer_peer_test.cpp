// Bit-exact compatibility: titan's ids equal the npm `tiktoken` package's
// (OpenAI's Rust tokenizer compiled to WASM) for cl100k_base, o200k_base,
// p50k_base and r50k_base, and llama3-tokenizer-js's for Llama 3, on >100 KB
// of multi-script text. The tokenizer.json files titan writes (a trained
// tokenizer, Llama 3) and GPT-2 style ones give the ids that
// @huggingface/tokenizers (the JavaScript port of Hugging Face's library)
// gives. The peers run under Node inside the test.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "data/peer_support.h"
#include "data/test_text.h"
#include "titan/core/error.h"
#include "titan/data/bpe_trainer.h"
#include "titan/data/hf_tokenizer_json.h"
#include "titan/data/tokenizer_loader.h"

namespace titan::data {
namespace tokenizer_peer_test {

const Tokenizer& builtin(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[name];
  if (!slot) slot = std::make_unique<Tokenizer>(load_builtin_tokenizer(name));
  return *slot;
}

// Equal ids, or a failure showing where they part and the text there.
void expect_same_ids(const Tokenizer& tokenizer, const std::vector<uint32_t>& ours, const std::vector<uint32_t>& peer) {
  size_t i = 0;
  while (i < ours.size() && i < peer.size() && ours[i] == peer[i]) ++i;
  if (i == ours.size() && i == peer.size()) return;
  auto show = [&](const std::vector<uint32_t>& ids) {
    std::string text;
    for (size_t k = i; k < ids.size() && k < i + 6; ++k) {
      text += std::to_string(ids[k]) + "='" + std::string(tokenizer.token_bytes(ids[k])) + "' ";
    }
    return text;
  };
  const size_t start = i >= 8 ? i - 8 : 0;
  const std::string before =
      tokenizer.decode(std::span<const uint32_t>(ours).subspan(start, std::min(i, ours.size()) - start));
  ADD_FAILURE() << tokenizer.name() << ": ids differ at index " << i << " of " << ours.size() << " (ours) / "
                << peer.size() << " (peer)\n  after: '" << before << "'\n  ours: " << show(ours)
                << "\n  peer: " << show(peer);
}

void compare_with_tiktoken(const std::string& encoding, const std::string& text, bool allow_special) {
  const Tokenizer& tokenizer = builtin(encoding);
  const std::vector<uint32_t> peer = testing::peer_encode("tiktoken", encoding, text, allow_special);
  const std::vector<uint32_t> ours = tokenizer.encode(text, {.allow_special = allow_special});
  ASSERT_GT(peer.size(), text.size() / 8) << "the peer returned too few ids";
  expect_same_ids(tokenizer, ours, peer);
  // The parallel encoder must give the same ids.
  expect_same_ids(tokenizer, tokenizer.encode(text, {.allow_special = allow_special, .threads = 4}), peer);
}

TEST(TokenizerPeer, TestTextIsLargeAndMultiScript) {
  const std::string text = testing::make_test_text();
  EXPECT_GE(text.size(), 100u * 1024);
  for (const char* sample : {"    ", "\t", "\r\n", "#include", "'ll", "👨‍👩‍👧‍👦", "1️⃣"}) {
    EXPECT_NE(text.find(sample), std::string::npos) << sample;
  }
  // Code points of each script: CJK, kana, Hangul, Cyrillic, Arabic, Devanagari, Thai, emoji.
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {{0x4E00, 0x9FA5}, {0x3041, 0x30FA},  {0xAC00, 0xD7A3},
                                                             {0x0410, 0x044F}, {0x0621, 0x064A},  {0x0915, 0x094D},
                                                             {0x0E01, 0x0E35}, {0x1F600, 0x1F64F}};
  std::vector<int> counts(ranges.size(), 0);
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<uint8_t>(text[i]);
    const size_t length = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uint32_t cp = length == 1 ? b : b & (0x7F >> length);
    for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[i + k]) & 0x3F);
    for (size_t r = 0; r < ranges.size(); ++r) counts[r] += cp >= ranges[r].first && cp <= ranges[r].second;
    i += length;
  }
  for (size_t r = 0; r < ranges.size(); ++r) EXPECT_GT(counts[r], 100) << "range " << r;
}

TEST(TokenizerPeer, Cl100kMatchesTiktoken) { compare_with_tiktoken("cl100k_base", testing::make_test_text(), false); }
TEST(TokenizerPeer, O200kMatchesTiktoken) { compare_with_tiktoken("o200k_base", testing::make_test_text(), false); }
TEST(TokenizerPeer, P50kMatchesTiktoken) {
  compare_with_tiktoken("p50k_base", testing::make_test_text({.min_bytes = 40 * 1024, .seed = 7}), false);
}
TEST(TokenizerPeer, R50kMatchesTiktoken) {
  compare_with_tiktoken("r50k_base", testing::make_test_text({.min_bytes = 40 * 1024, .seed = 8}), false);
}

// Whitespace the Unicode-aware engines could disagree on (NEL, U+180E, U+FEFF):
// titan follows tiktoken's Rust regex.
TEST(TokenizerPeer, DisputedWhitespaceMatchesTiktoken) {
  const std::string text = testing::make_test_text({.min_bytes = 40 * 1024, .seed = 3, .disputed_whitespace = true});
  compare_with_tiktoken("cl100k_base", text, false);
  compare_with_tiktoken("o200k_base", text, false);
}

TEST(TokenizerPeer, SpecialTokensMatchTiktoken) {
  std::string text = "<|endoftext|>Hello<|fim_prefix|> a<|fim_middle|>b <|fim_suffix|>\n<|endofprompt|><|endoftext";
  text += testing::make_test_text({.min_bytes = 4096, .seed = 11});
  text += "<|endoftext|><|endoftext|> <| endoftext |>";
  compare_with_tiktoken("cl100k_base", text, true);
  compare_with_tiktoken("o200k_base", text, true);
  // Not allowed: special token text is ordinary text.
  compare_with_tiktoken("cl100k_base", text, false);
}

TEST(TokenizerPeer, Llama3MatchesLlama3TokenizerJs) {
  const Tokenizer& tokenizer = builtin("llama3");
  std::string text = testing::make_test_text({.seed = 5});
  text +=
      "<|begin_of_text|>system<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
      "<|reserved_special_token_247|><|reserved_special_token_248|><|python_tag|>";
  const std::vector<uint32_t> peer = testing::peer_encode("llama3", "", text);
  // llama3-tokenizer-js always turns special token text into special tokens.
  const std::vector<uint32_t> ours = tokenizer.encode(text, {.allow_special = true});
  ASSERT_GT(peer.size(), text.size() / 8);
  expect_same_ids(tokenizer, ours, peer);
  EXPECT_EQ(tokenizer.bos_id(), 128000u);
  EXPECT_EQ(tokenizer.eos_id(), 128001u);
  EXPECT_EQ(tokenizer.special_token_id("<|eot_id|>"), 128009u);
  EXPECT_EQ(tokenizer.special_token_id("<|reserved_special_token_247|>"), 128255u);
  EXPECT_EQ(tokenizer.vocab_size(), 128256u);
}

// Our ids for `tokenizer` equal @huggingface/tokenizers' for the tokenizer.json we write for it.
void compare_with_hugging_face(const Tokenizer& tokenizer, const std::string& json, const std::string& text) {
  testing::TempDir dir;
  testing::write_bytes(dir / "tokenizer.json", json);
  const std::vector<uint32_t> peer = testing::peer_encode("hf", (dir / "tokenizer.json").string(), text);
  ASSERT_GT(peer.size(), text.size() / 16) << "the peer returned too few ids";
  expect_same_ids(tokenizer, tokenizer.encode(text, {.allow_special = true}), peer);
}

TEST(TokenizerPeer, TrainedTokenizerJsonMatchesHuggingFace) {
  BpeTrainerOptions options;
  options.vocab_size = 3000;
  const Tokenizer trained = train_bpe({testing::make_test_text({.min_bytes = 300 * 1024, .seed = 71})}, options);
  std::string text = testing::make_test_text({.seed = 72});
  text += "<|begin_of_text|>after a special token<|end_of_text|>";
  compare_with_hugging_face(trained, hf_tokenizer_json(trained), text);
}

TEST(TokenizerPeer, Llama3TokenizerJsonMatchesHuggingFace) {
  const Tokenizer& llama3 = builtin("llama3");
  std::string text = testing::make_test_text({.min_bytes = 100 * 1024, .seed = 73});
  text += "<|begin_of_text|>x<|eot_id|>";
  compare_with_hugging_face(llama3, hf_tokenizer_json(llama3), text);
}

// GPT-2's layout: a ByteLevel pre-tokenizer with its own regex and, in one
// variant, add_prefix_space; r50k_base's ranks as merges (by rank order).
TEST(TokenizerPeer, Gpt2StyleTokenizerJsonMatchesHuggingFace) {
  const Tokenizer& r50k = builtin("r50k_base");
  const std::string text = testing::make_test_text({.min_bytes = 40 * 1024, .seed = 74}) + "<|endoftext|> tail";
  nlohmann::json root = nlohmann::json::parse(hf_tokenizer_json(r50k));
  root["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  root["model"]["ignore_merges"] = false;  // as GPT-2's file: every piece goes through the merges
  for (bool prefix : {false, true}) {
    root["pre_tokenizer"]["add_prefix_space"] = prefix;
    // r50k_base's merges are every split of every token, ranked by the token:
    // exactly tiktoken's order when read back as a merges list.
    const Tokenizer tokenizer(parse_hf_tokenizer_json(root.dump(), "gpt2-style tokenizer.json"));
    EXPECT_EQ(tokenizer.add_prefix_space(), prefix);
    compare_with_hugging_face(tokenizer, root.dump(), text);
  }
}

TEST(TokenizerPeer, BuiltinVocabularies) {
  EXPECT_EQ(builtin("cl100k_base").vocab_size(), 100277u);
  EXPECT_EQ(builtin("cl100k_base").eos_id(), 100257u);
  EXPECT_EQ(builtin("o200k_base").vocab_size(), 200019u);
  EXPECT_EQ(builtin("o200k_base").eos_id(), 199999u);
  EXPECT_FALSE(builtin("cl100k_base").bos_id().has_value());
  EXPECT_THROW(builtin("cl100k_base").special_token_id("<|not_a_token|>"), Error);
}

}  // namespace tokenizer_peer_test
}  // namespace titan::data
