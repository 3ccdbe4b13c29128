// T5's and CLIP's tokenizer.json layouts (the general pipeline: normalizers,
// Metaspace, WhitespaceSplit, Split with "removed" and invert, SentencePiece
// Unigram, BPE with CLIP's "</w>") against Hugging Face tokenizers itself (the
// Rust library as a Node module) on hostile text. The T5 files carry a real
// SentencePiece model and its nmt_nfkc precompiled charsmap, trained here by
// spm_train (tests/reference/make_t5_tokenizer_json.py); the CLIP file is
// learned by tests/reference/make_clip_tokenizer_json.py; a third charsmap is
// built by hand (make_tiny_charsmap.py).
#include <gtest/gtest.h>

#include <memory>
#include <mutex>

#include "data/peer_support.h"
#include "titan/core/error.h"
#include "titan/data/hf_tokenizer_json.h"
#include "titan/data/padded_encoding.h"
#include "titan/data/tokenizer_loader.h"

namespace titan::data {
namespace tokenizer_pipeline_peer_test {

// The generated tokenizer.json files, made once per test process.
const testing::TempDir& fixtures() {
  static std::once_flag once;
  static std::unique_ptr<testing::TempDir> dir;
  std::call_once(once, [] {
    dir = std::make_unique<testing::TempDir>();
    const std::string reference = std::string(TITAN_SOURCE_DIR) + "/tests/reference/";
    for (const std::string& command :
         {"/usr/bin/python3 " + testing::shell_quote(reference + "make_t5_tokenizer_json.py") + " " +
              testing::shell_quote(dir->path().string()),
          "/usr/bin/python3 " + testing::shell_quote(reference + "make_clip_tokenizer_json.py") + " " +
              testing::shell_quote((*dir / "clip.json").string()),
          "/usr/bin/python3 " + testing::shell_quote(reference + "make_tiny_charsmap.py") + " " +
              testing::shell_quote((*dir / "tiny_charsmap.json").string())}) {
      const testing::CommandResult result = testing::run_command(command);
      if (result.exit_code != 0) {
        throw std::runtime_error(command + " failed: " + result.output +
                                 "\n(spm_train comes from Debian's sentencepiece: run scripts/setup.sh)");
      }
    }
  });
  return *dir;
}

// Text a normalizer or pre-tokenizer could get wrong.
std::vector<std::string> hostile_texts() {
  std::vector<std::string> texts = {
      "",
      " ",
      "   ",
      "Hello world",
      "  leading and trailing  ",
      "multiple   spaces\tand\t\ttabs\nnew\r\nlines",
      "ＡＢＣ ｆｕｌｌ ｗｉｄｔｈ １２３ ！？",
      "ｶﾞｷﾞ ﾊﾟﾋﾟ ｶﾀｶﾅ",  // half-width kana with (grapheme-extending) voiced marks
      "e\u0301 a\u0300\u0301 o\u0308\u0304 combining",
      "ｅ\u0301 full-width letter then a combining mark",
      "café naïve résumé Straße",
      "ﬁ ﬂ ① ㍻ ™ ½ ㎏",
      "東京 大阪 日本語 中文 한국어",
      "\u200b zero\u200dwidth \ufeff bom",
      "\u00a0nbsp\u3000ideographic\u2002en\u2009thin",
      "control\x01\x02\x7f\x1f chars",
      "emoji 👨‍👩‍👧‍👦 1️⃣ 🇫🇷",
      "İstanbul ΣΑΣ ǅ ß ẞ",
      "\u0085nel \u2028line\u2029para",
      "x<extra_id_0>y </s> <pad> <unk>",
      "It's 4k!! <|endoftext|> tail <|startoftext|>",
      "don't   we'll THEY'RE",
      "a\u0308\u0308\u0308\u0308\u0308\u0308 long cluster",
      "the the the the the the the the the the the the the the the the the the the the the the",
  };
  // Random mixes of the characters above and more, from a fixed seed.
  const std::vector<std::string> pool = {
      "a", "b",  "z",  "A",  "Q",      " ",      " ",   "  ",  "\t",     "\n",     "1",      "9",    "ｶ",  "ﾞ",
      "ﾟ", "Ａ", "ｚ", "１", "\u0301", "\u0308", "é",   "ß",   "İ",      "Σ",      "東",     "語",   "한", "ж",
      "ع", "क",  "ि",  "ไ",  "ﬁ",      "①",      "㍻",  "™",   "\u200b", "\u00a0", "\u3000", "\x01", "'s", "'",
      "!", ".",  ",",  "👍",  "\u200d", "🏽",   "the", "cat", "photo",  "<",      "|",      ">",    "▁"};
  uint64_t state = 20261206;
  for (int i = 0; i < 150; ++i) {
    std::string text;
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int length = 1 + static_cast<int>((state >> 33) % 24);
    for (int k = 0; k < length; ++k) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      text += pool[(state >> 33) % pool.size()];
    }
    texts.push_back(text);
  }
  return texts;
}

void expect_same_as_hugging_face(const std::string& file, const EncodeOptions& options) {
  const Tokenizer tokenizer = load_hf_tokenizer_file(file);
  EXPECT_TRUE(tokenizer.general_pipeline());
  const std::vector<std::string> texts = hostile_texts();
  const std::vector<std::vector<uint32_t>> peer = testing::hf_rust_encode(file, texts, true);
  ASSERT_EQ(peer.size(), texts.size());
  int compared = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<uint32_t> ours = tokenizer.encode(texts[i], options);
    EXPECT_EQ(ours, peer[i]) << file << ": text " << i << " '" << texts[i] << "'";
    compared += ours == peer[i];
  }
  EXPECT_EQ(compared, static_cast<int>(texts.size()));
}

TEST(TokenizerPipelinePeer, T5LegacyLayoutMatchesHuggingFace) {
  expect_same_as_hugging_face((fixtures() / "t5_legacy.json").string(), {.allow_special = true, .add_eos = true});
}
TEST(TokenizerPipelinePeer, T5CurrentLayoutMatchesHuggingFace) {
  expect_same_as_hugging_face((fixtures() / "t5_current.json").string(), {.allow_special = true, .add_eos = true});
}
TEST(TokenizerPipelinePeer, T5WhitespaceSplitLayoutMatchesHuggingFace) {
  expect_same_as_hugging_face((fixtures() / "t5_words.json").string(), {.allow_special = true, .add_eos = true});
}
// A charsmap built by hand (tests/reference/make_tiny_charsmap.py): keys that
// are prefixes of others, a rule that deletes, a combining sequence as a key.
TEST(TokenizerPipelinePeer, HandBuiltCharsmapMatchesHuggingFace) {
  expect_same_as_hugging_face((fixtures() / "tiny_charsmap.json").string(), {.allow_special = true, .add_eos = true});
}
TEST(TokenizerPipelinePeer, ClipMatchesHuggingFace) {
  expect_same_as_hugging_face((fixtures() / "clip.json").string(),
                              {.allow_special = true, .add_bos = true, .add_eos = true});
}

// FLUX's fixed-length rows: Hugging Face's truncation (the text cut, BOS/EOS
// kept) and padding, on texts short and long, with T5's and CLIP's settings.
void expect_same_padding(const std::string& file, const PaddingOptions& options) {
  const Tokenizer tokenizer = load_hf_tokenizer_file(file);
  std::vector<std::string> texts;
  for (const std::string& text : hostile_texts()) {
    if (text.find('<') == std::string::npos) texts.push_back(text);  // no special-token text: it stays text here
  }
  const std::vector<testing::PaddedPeerIds> peer =
      testing::hf_rust_encode_padded(file, texts, options.max_length, options.pad_id);
  const PaddedIds ours = encode_padded(tokenizer, texts, options);
  ASSERT_EQ(ours.rows, texts.size());
  ASSERT_EQ(peer.size(), texts.size());
  size_t truncated = 0;
  for (size_t row = 0; row < texts.size(); ++row) {
    const auto at = [&](const std::vector<int64_t>& values) {
      return std::vector<uint32_t>(values.begin() + static_cast<ptrdiff_t>(row * ours.length),
                                   values.begin() + static_cast<ptrdiff_t>((row + 1) * ours.length));
    };
    EXPECT_EQ(at(ours.ids), peer[row].ids) << file << ": text " << row << " '" << texts[row] << "'";
    EXPECT_EQ(at(ours.mask), peer[row].mask) << file << ": text " << row;
    truncated += peer[row].mask.back() == 1;
  }
  EXPECT_GT(truncated, 5u) << "some texts should fill the row";
  EXPECT_LT(truncated, texts.size()) << "some texts should be padded";
}

TEST(TokenizerPipelinePeer, T5PaddingMatchesHuggingFace) {
  const Tokenizer t5 = load_hf_tokenizer_file(fixtures() / "t5_current.json");
  const PaddingOptions options = t5_padding(t5, 12);
  EXPECT_EQ(options.pad_id, 0u);
  expect_same_padding((fixtures() / "t5_current.json").string(), options);
}

TEST(TokenizerPipelinePeer, ClipPaddingMatchesHuggingFace) {
  const Tokenizer clip = load_hf_tokenizer_file(fixtures() / "clip.json");
  const PaddingOptions options = clip_padding(clip, 10);
  EXPECT_EQ(options.pad_id, *clip.eos_id());
  expect_same_padding((fixtures() / "clip.json").string(), options);
}

// The pieces are real: the charsmap folds full-width letters, T5's layout ends
// with </s> and decodes back through Metaspace; CLIP lowercases and ends words with "</w>".
TEST(TokenizerPipelinePeer, T5AndClipBasics) {
  const Tokenizer t5 = load_hf_tokenizer_file(fixtures() / "t5_current.json");
  ASSERT_NE(t5.unigram(), nullptr);
  EXPECT_EQ(t5.eos_id(), 1u);
  EXPECT_FALSE(t5.bos_id().has_value());
  EXPECT_EQ(t5.encode("ＡＢＣ ｐｈｏｔｏ"), t5.encode("ABC photo"));
  EXPECT_NE(t5.encode("ABC photo"), t5.encode("abc photo"));
  const std::vector<uint32_t> ids = t5.encode("the photo of a cat", {.add_eos = true});
  EXPECT_EQ(ids.back(), 1u);
  EXPECT_EQ(t5.decode(std::span<const uint32_t>(ids).first(ids.size() - 1)), "the photo of a cat");
  EXPECT_EQ(t5.special_token_id("<extra_id_0>"), t5.vocab_size() - 1);

  const Tokenizer clip = load_hf_tokenizer_file(fixtures() / "clip.json");
  EXPECT_EQ(clip.encode("A PHOTO"), clip.encode("a photo"));
  EXPECT_EQ(clip.encode("a  \t photo"), clip.encode("a photo"));
  const std::vector<uint32_t> word = clip.encode("photo");
  ASSERT_EQ(word.size(), 1u);
  EXPECT_EQ(clip.token_bytes(word[0]), "photo</w>");
  EXPECT_NE(t5.fingerprint(), clip.fingerprint());
}

}  // namespace tokenizer_pipeline_peer_test
}  // namespace titan::data
