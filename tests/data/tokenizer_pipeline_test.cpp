// The general tokenizer pipeline's parts on their own: the Unigram model's
// Viterbi segmentation against every segmentation enumerated, the Split
// delimiter behaviours against Hugging Face's documented examples, and
// tokenizer.json keys titan does not support refused with the file and key.
// (T5 and CLIP files as wholes are compared with Hugging Face tokenizers in
// tokenizer_pipeline_peer_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "support/expect_error.h"
#include "titan/core/error.h"
#include "titan/data/base64.h"
#include "titan/data/hf_tokenizer_json.h"
#include "titan/data/pre_tokenizer.h"
#include "titan/data/unigram_model.h"

namespace titan::data {
namespace tokenizer_pipeline_test {

using json = nlohmann::json;
using titan::testing::expect_error;

// The best segmentations by brute force: every way to cut `text` into pieces
// of the vocabulary or single unknown characters (allowed, as in
// SentencePiece, only where no piece is exactly that character), scored as
// the model scores them; consecutive unknowns then fuse into one unk.
std::vector<std::vector<uint32_t>> brute_force(const std::vector<std::pair<std::string, double>>& pieces, uint32_t unk,
                                               const std::string& text) {
  double min_score = INFINITY;
  for (const auto& piece : pieces) min_score = std::min(min_score, piece.second);
  double best = -INFINITY;
  std::vector<std::vector<uint32_t>> best_ids;  // every segmentation of the best score (ties: same pieces reordered)
  std::vector<uint32_t> ids;
  std::function<void(size_t, double)> walk = [&](size_t at, double score) {
    if (at == text.size()) {
      if (score > best + 1e-9) {
        best = score;
        best_ids.clear();
      }
      if (score >= best - 1e-9) {
        std::vector<uint32_t> fused;
        for (uint32_t id : ids) {
          if (id == unk && !fused.empty() && fused.back() == unk) continue;
          fused.push_back(id);
        }
        best_ids.push_back(fused);
      }
      return;
    }
    bool covers_char = false;
    for (uint32_t id = 0; id < pieces.size(); ++id) {
      if (text.compare(at, pieces[id].first.size(), pieces[id].first) != 0) continue;
      // A repeated piece is its last id, with that id's score (Hugging Face's map keeps the last).
      bool repeated_later = false;
      for (uint32_t later = id + 1; later < pieces.size(); ++later) {
        repeated_later = repeated_later || pieces[later].first == pieces[id].first;
      }
      if (repeated_later) continue;
      covers_char = covers_char || pieces[id].first.size() == 1;
      ids.push_back(id);
      walk(at + pieces[id].first.size(), score + pieces[id].second);
      ids.pop_back();
    }
    if (!covers_char) {
      ids.push_back(unk);
      walk(at + 1, score + min_score - 10.0);
      ids.pop_back();
    }
  };
  walk(0, 0.0);
  return best_ids;
}

TEST(TokenizerPipeline, UnigramFindsTheBestSegmentation) {
  // ASCII pieces over a small alphabet; 'x' and 'y' are in no piece, so they are unk.
  std::vector<std::pair<std::string, double>> pieces = {{"<unk>", 0.0}};
  uint64_t state = 7;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  const std::string alphabet = "abcd";
  for (int i = 0; i < 40; ++i) {
    std::string piece;
    const size_t length = 1 + next() % 4;
    for (size_t k = 0; k < length; ++k) piece += alphabet[next() % alphabet.size()];
    pieces.emplace_back(piece, -1.0 - static_cast<double>(next() % 100000) / 9973.0);
  }
  for (char c : std::string("abc")) pieces.emplace_back(std::string(1, c), -12.5);  // 'd' alone is unk
  const UnigramModel model(pieces, 0, "test");
  int with_unknowns = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const size_t length = 1 + next() % 9;
    for (size_t k = 0; k < length; ++k) text += "abcdxy"[next() % 6];
    std::vector<uint32_t> ours;
    model.encode(text, ours);
    const auto best = brute_force(pieces, 0, text);
    EXPECT_NE(std::find(best.begin(), best.end(), ours), best.end()) << text << ": not a best segmentation";
    with_unknowns += std::find(ours.begin(), ours.end(), 0u) != ours.end();
  }
  EXPECT_GT(with_unknowns, 30);
}

TEST(TokenizerPipeline, UnigramWithoutUnkIdRefusesUnknownText) {
  const UnigramModel model({{"a", -1.0}, {"b", -2.0}}, std::nullopt, "t.json");
  std::vector<uint32_t> ids;
  model.encode("ab", ids);
  EXPECT_EQ(ids, (std::vector<uint32_t>{0, 1}));
  expect_error([&] { model.encode("abc", ids); }, {"t.json", "'c'", "unk_id"});
}

// Hugging Face's SplitDelimiterBehavior examples: "the-final--countdown" split on "-".
TEST(TokenizerPipeline, SplitBehavioursAreHuggingFaces) {
  const auto split = [](PreTokenizerStep::Behavior behavior, bool invert, const std::string& pattern) {
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::kSplit;
    step.behavior = behavior;
    step.invert = invert;
    step.pattern = std::make_shared<SplitPattern>(pattern, "test", !invert);
    std::vector<PreToken> pieces;
    SplitScratchCache scratch;
    pre_tokenize({step}, "the-final--countdown", true, pieces, scratch);
    std::vector<std::string> texts;
    for (const auto& piece : pieces) texts.push_back(piece.text);
    return texts;
  };
  using V = std::vector<std::string>;
  using B = PreTokenizerStep;
  EXPECT_EQ(split(B::kRemoved, false, "-"), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split(B::kIsolated, false, "-"), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(B::kMergedWithPrevious, false, "-"), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(B::kMergedWithNext, false, "-"), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(B::kContiguous, false, "-"), (V{"the", "-", "final", "--", "countdown"}));
  // Inverted: the matches are kept and what lies between them is the delimiter.
  EXPECT_EQ(split(B::kRemoved, true, "[a-z]+"), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split(B::kIsolated, true, "[a-z]+"), (V{"the", "-", "final", "--", "countdown"}));
}

TEST(TokenizerPipeline, MetaspaceAndWhitespaceSplit) {
  PreTokenizerStep metaspace;
  metaspace.kind = PreTokenizerStep::kMetaspace;
  metaspace.replacement = "\u2581";
  metaspace.pattern = std::make_shared<SplitPattern>(metaspace.replacement, "test", true);
  std::vector<PreToken> pieces;
  SplitScratchCache scratch;
  pre_tokenize({metaspace}, "Hey  friend", true, pieces, scratch);
  ASSERT_EQ(pieces.size(), 3u);  // "▁Hey", "▁", "▁friend"
  EXPECT_EQ(pieces[0].text, "\u2581Hey");
  EXPECT_EQ(pieces[1].text, "\u2581");
  EXPECT_EQ(pieces[2].text, "\u2581friend");
  metaspace.prepend = PreTokenizerStep::kFirst;
  pre_tokenize({metaspace}, "Hey", false, pieces, scratch);  // not the input's start: no prefix
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].text, "Hey");
}

// A T5-like tokenizer.json: a Unigram vocabulary and a normalizer to break.
json unigram_json() {
  return {{"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}}})},
          {"normalizer", {{"type", "Lowercase"}}},
          {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}}},
          {"model",
           {{"type", "Unigram"},
            {"unk_id", 0},
            {"vocab", json::array({json::array({"<unk>", 0.0}), json::array({"\u2581", -2.0}),
                                   json::array({"\u2581a", -1.0}), json::array({"b", -3.0})})}}}};
}

TEST(TokenizerPipeline, UnigramTokenizerJson) {
  const Tokenizer tokenizer(parse_hf_tokenizer_json(unigram_json().dump(), "u.json"));
  EXPECT_EQ(tokenizer.encode("A b"), (std::vector<uint32_t>{2, 1, 3}));
  EXPECT_EQ(tokenizer.encode("Ac"), (std::vector<uint32_t>{2, 0}));
  EXPECT_EQ(tokenizer.decode(std::vector<uint32_t>{2, 1, 3}), "a b");
}

TEST(TokenizerPipeline, UnsupportedKeysAreRefused) {
  const auto parse = [](const json& j) { (void)Tokenizer(parse_hf_tokenizer_json(j.dump(), "bad/tokenizer.json")); };
  json j = unigram_json();
  j["model"]["type"] = "WordPiece";
  expect_error([&] { parse(j); }, {"bad/tokenizer.json", "model.type", "WordPiece"});
  j = unigram_json();
  j["model"]["byte_fallback"] = true;
  expect_error([&] { parse(j); }, {"model.byte_fallback"});
  j = unigram_json();
  j["model"]["vocab"][2] = json::array({"\u2581a"});
  expect_error([&] { parse(j); }, {"model.vocab[2]", "[piece, score]"});
  j = unigram_json();
  j["model"]["vocab"][3][1] = "-3";
  expect_error([&] { parse(j); }, {"model.vocab[3][1]", "number"});
  j = unigram_json();
  j["model"]["unk_id"] = 9;
  expect_error([&] { parse(j); }, {"model.unk_id", "9"});
  j = unigram_json();
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "not base64!"}};
  expect_error([&] { parse(j); }, {"normalizer.precompiled_charsmap", "base64"});
  j = unigram_json();
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(std::string("\x08\0\0\0", 4))}};
  expect_error([&] { parse(j); }, {"normalizer.precompiled_charsmap", "trie size"});
  // A trie whose root points outside it: found when text reaches it, naming the key.
  j = unigram_json();
  const std::string corrupt("\x04\0\0\0\xFF\xFF\xFF\x7F", 8);
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers", json::array({{{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(corrupt)}}})}};
  const Tokenizer corrupt_tokenizer(parse_hf_tokenizer_json(j.dump(), "bad/tokenizer.json"));
  expect_error([&] { corrupt_tokenizer.encode("a"); }, {"normalizer.normalizers[0].precompiled_charsmap", "corrupt"});
  j = unigram_json();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "(unclosed"}}}, {"content", " "}};
  expect_error([&] { parse(j); }, {"normalizer.pattern", "does not compile"});
  j = unigram_json();
  j["pre_tokenizer"]["prepend_scheme"] = "sometimes";
  expect_error([&] { parse(j); }, {"pre_tokenizer.prepend_scheme", "sometimes"});
  j = unigram_json();
  j["pre_tokenizer"]["prepend_scheme"] = "first";
  expect_error([&] { parse(j); }, {"pre_tokenizer.prepend_scheme", "normalizer"});
  j = unigram_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}};
  expect_error([&] { parse(j); }, {"pre_tokenizer", "ByteLevel", "Unigram"});
  j = unigram_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
  expect_error([&] { parse(j); }, {"pre_tokenizer.behavior", "Sideways"});
  j = unigram_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", ""}};
  expect_error([&] { parse(j); }, {"pre_tokenizer.replacement"});
}

}  // namespace tokenizer_pipeline_test
}  // namespace titan::data
