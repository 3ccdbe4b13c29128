// decode(encode(bytes)) == bytes for arbitrary bytes, invalid UTF-8 included;
// the parallel encoder equals the sequential one; edge cases of the encoder.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "data/peer_support.h"
#include "data/test_text.h"
#include "titan/core/error.h"
#include "titan/data/bpe_trainer.h"
#include "titan/data/tokenizer_loader.h"

namespace titan::data {
namespace tokenizer_roundtrip_test {

const Tokenizer& cached(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) slot = std::make_unique<Tokenizer>(load_builtin_tokenizer(name));
  return *slot;
}

const Tokenizer& trained() {
  static const Tokenizer tokenizer = [] {
    const std::string corpus = testing::make_test_text({.min_bytes = 200 * 1024, .seed = 21});
    BpeTrainerOptions options;
    options.vocab_size = 2000;
    return train_bpe({corpus}, options);
  }();
  return tokenizer;
}

std::vector<const Tokenizer*> all_tokenizers() {
  return {&cached("cl100k_base"), &cached("o200k_base"), &cached("llama3"), &trained()};
}

TEST(TokenizerRoundTrip, ArbitraryBytesIncludingInvalidUtf8) {
  for (const Tokenizer* tokenizer : all_tokenizers()) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      const std::string bytes = testing::make_random_bytes(20000 + seed * 997, seed);
      for (bool allow_special : {false, true}) {
        const std::vector<uint32_t> ids = tokenizer->encode(bytes, {.allow_special = allow_special});
        ASSERT_EQ(tokenizer->decode(ids), bytes) << tokenizer->name() << " seed " << seed;
      }
    }
  }
}

TEST(TokenizerRoundTrip, EveryByteValueAndShortStrings) {
  for (const Tokenizer* tokenizer : all_tokenizers()) {
    for (int b = 0; b < 256; ++b) {
      const std::string one(1, static_cast<char>(b));
      EXPECT_EQ(tokenizer->decode(tokenizer->encode(one)), one) << tokenizer->name() << " byte " << b;
      const std::string three = "a" + one + "\xE2\x82";
      EXPECT_EQ(tokenizer->decode(tokenizer->encode(three)), three) << tokenizer->name() << " byte " << b;
    }
    EXPECT_TRUE(tokenizer->encode("").empty());
    EXPECT_EQ(tokenizer->decode({}), "");
  }
}

TEST(TokenizerRoundTrip, LongPiecesUseTheHeapMerge) {
  // Pieces longer than the quadratic scan's limit: a long word, a long
  // whitespace run and a long run of invalid bytes.
  const std::string word(5000, 'x'), spaces(100000, ' '), invalid(3000, '\xFF');
  for (const Tokenizer* tokenizer : all_tokenizers()) {
    for (const std::string& text : {word, spaces, invalid, word + "\n" + spaces + "y"}) {
      EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text) << tokenizer->name();
    }
  }
}

TEST(TokenizerRoundTrip, ParallelEncodeEqualsSequential) {
  std::string text = testing::make_test_text({.min_bytes = 1 << 20, .seed = 31});
  text += testing::make_random_bytes(300000, 4);  // invalid bytes too
  text += "<|endoftext|><|begin_of_text|>" + testing::make_test_text({.min_bytes = 200000, .seed = 32});
  for (const Tokenizer* tokenizer : all_tokenizers()) {
    for (bool allow_special : {false, true}) {
      const auto sequential = tokenizer->encode(text, {.allow_special = allow_special});
      for (int threads : {2, 3, 8}) {
        ASSERT_EQ(tokenizer->encode(text, {.allow_special = allow_special, .threads = threads}), sequential)
            << tokenizer->name() << " threads " << threads;
      }
    }
  }
}

TEST(TokenizerRoundTrip, BosEosAndSpecials) {
  const Tokenizer& llama3 = cached("llama3");
  const auto ids = llama3.encode("hi", {.add_bos = true, .add_eos = true});
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 128000u);
  EXPECT_EQ(ids.back(), 128001u);
  EXPECT_EQ(llama3.decode(ids), "<|begin_of_text|>hi<|end_of_text|>");
  // Special token text stays text unless allowed.
  EXPECT_GT(llama3.encode("<|eot_id|>").size(), 1u);
  EXPECT_EQ(llama3.encode("<|eot_id|>", {.allow_special = true}), std::vector<uint32_t>{128009});
  // cl100k_base has no BOS: asking for one is an error naming the tokenizer.
  try {
    cached("cl100k_base").encode("x", {.add_bos = true});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cl100k_base"), std::string::npos) << e.what();
  }
  try {
    llama3.special_token_id("<|im_start|>");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown special token '<|im_start|>'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(llama3.decode(std::vector<uint32_t>{128256}), Error);
}

}  // namespace tokenizer_roundtrip_test
}  // namespace titan::data
