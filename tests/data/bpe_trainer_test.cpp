// The BPE trainer: a hand-checked case, identical merges to a naive
// recount-everything trainer written here as the independent reference,
// determinism, and errors.
#include <gtest/gtest.h>

#include <map>

#include "data/test_text.h"
#include "titan/core/error.h"
#include "titan/data/bpe_trainer.h"
#include "titan/data/hf_tokenizer_json.h"
#include "titan/data/split_pattern.h"

namespace titan::data {
namespace bpe_trainer_test {

// The textbook algorithm, slow and obvious: count every adjacent pair of every
// word, merge the most frequent (smallest ids on ties), repeat.
std::vector<std::pair<std::string, std::string>> naive_merges(const std::string& corpus, size_t merges,
                                                              uint64_t min_frequency) {
  SplitPattern pattern(kDefaultSplitPattern, "naive");
  auto scratch = pattern.make_scratch();
  std::vector<size_t> ends;
  pattern.split(corpus, 0, corpus.size(), ends, *scratch);
  std::map<std::string, uint64_t> counts;
  size_t start = 0;
  for (size_t end : ends) {
    ++counts[corpus.substr(start, end - start)];
    start = end;
  }
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  std::map<std::string, uint32_t> id_of;
  for (uint32_t b = 0; b < 256; ++b) id_of[tokens[b]] = b;
  std::vector<std::pair<std::vector<uint32_t>, uint64_t>> words;
  for (const auto& [word, count] : counts) {
    std::vector<uint32_t> symbols;
    for (char c : word) symbols.push_back(static_cast<uint8_t>(c));
    words.emplace_back(symbols, count);
  }
  std::vector<std::pair<std::string, std::string>> result;
  while (result.size() < merges) {
    std::map<std::pair<uint32_t, uint32_t>, uint64_t> pairs;
    for (const auto& [symbols, count] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i) pairs[{symbols[i], symbols[i + 1]}] += count;
    }
    std::pair<uint32_t, uint32_t> best{};
    uint64_t best_count = 0;
    for (const auto& [pair, count] : pairs) {
      if (count > best_count) {  // map order: the smallest pair wins ties
        best = pair;
        best_count = count;
      }
    }
    if (best_count < min_frequency) break;
    const std::string bytes = tokens[best.first] + tokens[best.second];
    auto [it, inserted] = id_of.emplace(bytes, static_cast<uint32_t>(tokens.size()));
    if (inserted) tokens.push_back(bytes);
    result.emplace_back(tokens[best.first], tokens[best.second]);
    for (auto& [symbols, count] : words) {
      std::vector<uint32_t> merged;
      for (size_t i = 0; i < symbols.size();) {
        if (i + 1 < symbols.size() && symbols[i] == best.first && symbols[i + 1] == best.second) {
          merged.push_back(it->second);
          i += 2;
        } else {
          merged.push_back(symbols[i++]);
        }
      }
      symbols = merged;
    }
  }
  return result;
}

std::vector<std::pair<std::string, std::string>> merges_of(const Tokenizer& tokenizer) {
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& [left, right] : tokenizer.model().merges_in_rank_order()) {
    merges.emplace_back(tokenizer.model().token(left), tokenizer.model().token(right));
  }
  return merges;
}

TEST(BpeTrainer, TextbookExample) {
  BpeTrainerOptions options;
  options.vocab_size = 300;
  options.special_tokens = {};
  const Tokenizer tokenizer = train_bpe({"aaabdaaabac"}, options);
  // aa (4 times, overlapping), then ab and aa+a tie at 2: the smaller pair (a, b) wins; then aa+ab.
  const std::vector<std::pair<std::string, std::string>> expected = {{"a", "a"}, {"a", "b"}, {"aa", "ab"}};
  EXPECT_EQ(merges_of(tokenizer), expected);
  EXPECT_EQ(tokenizer.vocab_size(), 259u);
  EXPECT_EQ(tokenizer.encode("aaabdaaabac"), (std::vector<uint32_t>{258, 'd', 258, 'a', 'c'}));
}

TEST(BpeTrainer, MatchesNaiveTrainer) {
  const std::string corpus = testing::make_test_text({.min_bytes = 30 * 1024, .seed = 51});
  BpeTrainerOptions options;
  options.vocab_size = 256 + 300;
  options.special_tokens = {};
  options.min_frequency = 2;
  const Tokenizer tokenizer = train_bpe({corpus}, options);
  EXPECT_EQ(merges_of(tokenizer), naive_merges(corpus, 300, 2));
}

TEST(BpeTrainer, DeterministicAcrossRunsAndThreads) {
  const std::string corpus = testing::make_test_text({.min_bytes = 3 << 20, .seed = 52});
  BpeTrainerOptions options;
  options.vocab_size = 3000;
  options.threads = 1;
  BpeTrainingStats stats;
  const std::string one = hf_tokenizer_json(train_bpe({corpus}, options, &stats));
  EXPECT_EQ(stats.merges, 3000u - 256 - 5);  // 5 default special tokens
  options.threads = 2;                       // the corpus is cut into work units shared by the threads
  EXPECT_EQ(hf_tokenizer_json(train_bpe({corpus}, options)), one);
}

TEST(BpeTrainer, TrainedTokenizerHasSpecialsAndRoundTrips) {
  const std::string corpus = testing::make_test_text({.min_bytes = 100 * 1024, .seed = 53});
  BpeTrainerOptions options;
  options.vocab_size = 1000;
  const Tokenizer tokenizer = train_bpe({corpus}, options);
  EXPECT_EQ(tokenizer.vocab_size(), 1000u);
  // The specials follow the merges, in Llama 3's order: bos, eos, then the chat markers.
  EXPECT_EQ(tokenizer.bos_id(), 995u);
  EXPECT_EQ(tokenizer.eos_id(), 996u);
  EXPECT_EQ(tokenizer.special_token_id("<|start_header_id|>"), 997u);
  EXPECT_EQ(tokenizer.special_token_id("<|end_header_id|>"), 998u);
  EXPECT_EQ(tokenizer.special_token_id("<|eot_id|>"), 999u);
  EXPECT_EQ(tokenizer.encode("<|eot_id|>", {.allow_special = true}), (std::vector<uint32_t>{999}));
  const std::string bytes = testing::make_random_bytes(50000, 54);
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(bytes)), bytes);
  // Training compresses the text it was trained on.
  EXPECT_LT(tokenizer.encode(corpus).size(), corpus.size() / 2);
}

TEST(BpeTrainer, Errors) {
  BpeTrainerOptions options;
  EXPECT_THROW(train_bpe({}, options), Error);
  EXPECT_THROW(train_bpe({""}, options), Error);
  options.vocab_size = 200;
  EXPECT_THROW(train_bpe({"text"}, options), Error);
}

}  // namespace bpe_trainer_test
}  // namespace titan::data
