#include "titan/data/bpe_trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <queue>
#include <unordered_map>

#include "titan/core/error.h"
#include "titan/data/split_pattern.h"
#include "titan/data/utf8.h"

namespace titan::data {

const char* const kDefaultSplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using Clock = std::chrono::steady_clock;
using PieceCounts = std::unordered_map<std::string_view, uint64_t>;

uint64_t pair_key(uint32_t left, uint32_t right) { return (static_cast<uint64_t>(left) << 32) | right; }

// Cuts large documents at "\n" + letter so that threads share the work; the
// split regex ends a piece there anyway.
std::vector<std::string_view> work_units(const std::vector<std::string_view>& documents) {
  constexpr size_t kUnit = 1 << 20;
  std::vector<std::string_view> units;
  for (std::string_view doc : documents) {
    while (doc.size() > 2 * kUnit) {
      size_t cut = doc.find('\n', kUnit);
      while (cut != std::string_view::npos && cut + 1 < doc.size() &&
             !((doc[cut + 1] >= 'a' && doc[cut + 1] <= 'z') || (doc[cut + 1] >= 'A' && doc[cut + 1] <= 'Z'))) {
        cut = doc.find('\n', cut + 1);
      }
      if (cut == std::string_view::npos || cut + 1 >= doc.size()) break;
      units.push_back(doc.substr(0, cut + 1));
      doc.remove_prefix(cut + 1);
    }
    if (!doc.empty()) units.push_back(doc);
  }
  return units;
}

void count_pieces(std::string_view text, const SplitPattern& pattern, SplitPattern::Scratch& scratch,
                  std::vector<size_t>& ends, PieceCounts& counts, uint64_t& pieces) {
  size_t pos = 0;
  while (pos < text.size()) {
    const std::string_view rest = text.substr(pos);
    const size_t valid = valid_utf8_prefix(rest);
    if (valid == 0) {  // a run of invalid bytes is one piece, as when encoding
      const size_t invalid = invalid_utf8_prefix(rest);
      ++counts[rest.substr(0, invalid)];
      ++pieces;
      pos += invalid;
      continue;
    }
    const std::string_view subject = rest.substr(0, valid);
    ends.clear();
    pattern.split(subject, 0, subject.size(), ends, scratch);
    size_t start = 0;
    for (size_t end : ends) {
      ++counts[subject.substr(start, end - start)];
      start = end;
    }
    pieces += ends.size();
    pos += valid;
  }
}

struct Word {
  std::vector<uint32_t> symbols;
  uint64_t count = 0;
  uint32_t stamp = 0;  // last merge that visited this word (dedupes the pair index)
};

struct HeapEntry {
  uint64_t count;
  uint64_t pair;
  // Most frequent first; on ties the smaller pair (older ids) first, so training is deterministic.
  bool operator<(const HeapEntry& other) const {
    return count != other.count ? count < other.count : pair > other.pair;
  }
};

}  // namespace

Tokenizer train_bpe(const std::vector<std::string_view>& documents, const BpeTrainerOptions& options,
                    BpeTrainingStats* stats) {
  BpeTrainingStats local_stats;
  BpeTrainingStats& st = stats ? *stats : local_stats;
  const uint32_t specials = static_cast<uint32_t>(options.special_tokens.size());
  TITAN_CHECK(options.vocab_size >= 256 + specials,
              "tokenizer training: vocab size {} is below the 256 byte tokens plus {} special tokens",
              options.vocab_size, specials);
  TITAN_CHECK(options.vocab_size <= (1u << 24), "tokenizer training: vocab size {} is too large", options.vocab_size);
  const uint32_t target_tokens = options.vocab_size - specials;

  // 1. Pre-tokenize and count distinct pieces, one map per thread.
  const auto start = Clock::now();
  const SplitPattern pattern(options.split_pattern, "tokenizer training");
  const std::vector<std::string_view> units = work_units(documents);
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  std::vector<PieceCounts> thread_counts(static_cast<size_t>(threads));
  std::vector<uint64_t> thread_pieces(static_cast<size_t>(threads), 0);
#pragma omp parallel num_threads(threads)
  {
    const auto t = static_cast<size_t>(omp_get_thread_num());
    auto scratch = pattern.make_scratch();
    std::vector<size_t> ends;
#pragma omp for schedule(dynamic, 1)
    for (size_t u = 0; u < units.size(); ++u) {
      count_pieces(units[u], pattern, *scratch, ends, thread_counts[t], thread_pieces[t]);
    }
  }
  PieceCounts counts = std::move(thread_counts[0]);
  for (size_t t = 1; t < thread_counts.size(); ++t) {
    for (const auto& [piece, count] : thread_counts[t]) counts[piece] += count;
  }
  for (uint64_t pieces : thread_pieces) st.pieces += pieces;
  TITAN_CHECK(!counts.empty(), "tokenizer training: the corpus is empty");
  st.unique_pieces = counts.size();

  // Words in a fixed order (the hash map's is not), so training is deterministic.
  std::vector<std::pair<std::string_view, uint64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words(sorted.size());
  for (size_t w = 0; w < sorted.size(); ++w) {
    words[w].count = sorted[w].second;
    for (char c : sorted[w].first) words[w].symbols.push_back(static_cast<uint8_t>(c));
  }
  st.pretokenize_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // 2. Pair counts and, per pair, the words that (may) contain it.
  const auto merge_start = Clock::now();
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<uint32_t>> pair_words;
  for (uint32_t w = 0; w < words.size(); ++w) {
    const auto& symbols = words[w].symbols;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const uint64_t key = pair_key(symbols[i], symbols[i + 1]);
      pair_counts[key] += static_cast<int64_t>(words[w].count);
      auto& list = pair_words[key];
      if (list.empty() || list.back() != w) list.push_back(w);
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [key, count] : pair_counts) heap.push({static_cast<uint64_t>(count), key});

  std::vector<std::string> tokens;
  tokens.reserve(target_tokens + specials);
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  std::unordered_map<std::string, uint32_t> id_of;
  for (uint32_t b = 0; b < 256; ++b) id_of.emplace(tokens[b], b);
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  std::vector<uint32_t> merged_symbols;
  std::unordered_map<uint64_t, int64_t> delta;

  // 3. Merge the most frequent pair until the vocabulary is full.
  while (tokens.size() < target_tokens && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    const auto found = pair_counts.find(top.pair);
    const uint64_t current =
        found == pair_counts.end() ? 0 : static_cast<uint64_t>(std::max<int64_t>(0, found->second));
    if (current != top.count) {  // stale: the pair lost occurrences since it was pushed
      if (current > 0) heap.push({current, top.pair});
      continue;
    }
    if (current < std::max<uint64_t>(options.min_frequency, 1)) break;
    const auto left = static_cast<uint32_t>(top.pair >> 32), right = static_cast<uint32_t>(top.pair);
    // Two different merges can spell the same bytes ("a"+"bc", "ab"+"c"): they share one id.
    std::string bytes = tokens[left] + tokens[right];
    auto [entry, inserted] = id_of.emplace(bytes, static_cast<uint32_t>(tokens.size()));
    if (inserted) tokens.push_back(std::move(bytes));
    const uint32_t merged = entry->second;
    merges.emplace_back(left, right);
    const auto stamp = static_cast<uint32_t>(merges.size());

    delta.clear();
    std::vector<uint32_t> affected = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    for (uint32_t w : affected) {
      Word& word = words[w];
      if (word.stamp == stamp) continue;
      word.stamp = stamp;
      auto& symbols = word.symbols;
      merged_symbols.clear();
      bool changed = false;
      for (size_t i = 0; i < symbols.size();) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          merged_symbols.push_back(merged);
          i += 2;
          changed = true;
        } else {
          merged_symbols.push_back(symbols[i]);
          i += 1;
        }
      }
      if (!changed) continue;
      const auto count = static_cast<int64_t>(word.count);
      for (size_t i = 0; i + 1 < symbols.size(); ++i) delta[pair_key(symbols[i], symbols[i + 1])] -= count;
      for (size_t i = 0; i + 1 < merged_symbols.size(); ++i) {
        const uint64_t key = pair_key(merged_symbols[i], merged_symbols[i + 1]);
        delta[key] += count;
        if (merged_symbols[i] == merged || merged_symbols[i + 1] == merged) {
          auto& list = pair_words[key];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
      symbols.swap(merged_symbols);
    }
    for (const auto& [key, change] : delta) {
      if (change == 0) continue;
      int64_t& count = pair_counts[key];
      count += change;
      if (change > 0) heap.push({static_cast<uint64_t>(count), key});  // new pairs (they hold the new id)
      if (count <= 0) pair_counts.erase(key);
    }
  }
  st.merges = static_cast<uint32_t>(merges.size());
  st.merge_seconds = std::chrono::duration<double>(Clock::now() - merge_start).count();

  TokenizerConfig config;
  config.name = options.name;
  for (const auto& text : options.special_tokens) {
    TITAN_CHECK(!text.empty(), "tokenizer training: empty special token");
    config.specials.push_back({text, static_cast<uint32_t>(tokens.size() + config.specials.size()), true});
  }
  config.model = BpeModel::from_merges(std::move(tokens), merges, /*ignore_merges=*/false, options.name);
  config.split_patterns = {options.split_pattern};
  config.literal_patterns = {false};
  for (const auto& special : config.specials) {
    if (special.text == "<|begin_of_text|>") config.bos = special.id;
    if (special.text == "<|end_of_text|>") config.eos = special.id;
  }
  return Tokenizer(std::move(config));
}

}  // namespace titan::data
