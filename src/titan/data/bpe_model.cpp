#include "titan/data/bpe_model.h"

#include <algorithm>
#include <functional>
#include <tuple>

#include "titan/core/error.h"
#include "titan/data/hashing.h"

namespace titan::data {
namespace {

uint64_t table_capacity(size_t entries) {
  uint64_t capacity = 16;
  while (capacity < entries + entries / 2 + 1) capacity *= 2;  // load factor <= 2/3
  return capacity;
}

// Pieces up to this many bytes use the quadratic scan (tiktoken's own
// algorithm: a few dozen symbols fit in cache and beat a heap); longer ones,
// such as a megabyte of spaces or an invalid byte run, use a heap.
constexpr size_t kQuadraticLimit = 96;

}  // namespace

void BpeModel::set_tokens(std::vector<std::string> tokens, std::string_view source) {
  TITAN_CHECK(!tokens.empty(), "{}: the vocabulary is empty", source);
  TITAN_CHECK(tokens.size() < 0xFFFFFFF0u, "{}: vocabulary of {} tokens is too large", source, tokens.size());
  present_.assign(tokens.size(), 0);
  offsets_.assign(tokens.size() + 1, 0);
  size_t total = 0;
  for (const auto& token : tokens) total += token.size();
  arena_.clear();
  arena_.reserve(total);
  for (size_t i = 0; i < tokens.size(); ++i) {
    present_[i] = !tokens[i].empty();
    arena_ += tokens[i];
    offsets_[i + 1] = arena_.size();
  }
  const size_t count = static_cast<size_t>(std::count(present_.begin(), present_.end(), 1));
  const uint64_t capacity = table_capacity(count);
  token_mask_ = capacity - 1;
  token_slots_.assign(capacity, 0);
  token_tags_.assign(capacity, 0);
  for (uint32_t id = 0; id < tokens.size(); ++id) {
    if (!present_[id]) continue;
    const std::string_view bytes = token(id);
    const uint64_t hash = hash_bytes(bytes);
    uint64_t slot = hash & token_mask_;
    bool duplicate = false;
    while (token_slots_[slot] != 0) {
      const uint32_t other = token_slots_[slot] - 1;
      if (token_tags_[slot] == static_cast<uint32_t>(hash >> 32) && token(other) == bytes) {
        duplicate = true;  // the first id wins, as in tiktoken's decoder map
        break;
      }
      slot = (slot + 1) & token_mask_;
    }
    if (duplicate) continue;
    token_slots_[slot] = id + 1;
    token_tags_[slot] = static_cast<uint32_t>(hash >> 32);
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    const auto id = find(std::string_view(&byte, 1));
    TITAN_CHECK(id.has_value(),
                "{}: the vocabulary has no token for the single byte 0x{:02X}; byte-level BPE needs all 256 "
                "so that every input can be encoded",
                source, b);
    byte_ids_[b] = *id;
  }
}

std::optional<uint32_t> BpeModel::find(std::string_view bytes, uint64_t hash) const {
  const auto tag = static_cast<uint32_t>(hash >> 32);
  for (uint64_t slot = hash & token_mask_;; slot = (slot + 1) & token_mask_) {
    const uint32_t entry = token_slots_[slot];
    if (entry == 0) return std::nullopt;
    if (token_tags_[slot] == tag && token(entry - 1) == bytes) return entry - 1;
  }
}

std::optional<uint32_t> BpeModel::find(std::string_view bytes) const { return find(bytes, hash_bytes(bytes)); }

void BpeModel::build_pair_table(std::vector<std::pair<uint64_t, PairValue>> pairs) {
  const uint64_t capacity = table_capacity(pairs.size());
  pair_mask_ = capacity - 1;
  pair_keys_.assign(capacity, kEmptyKey);
  pair_values_.assign(capacity, PairValue{});
  num_merges_ = 0;
  for (const auto& [key, value] : pairs) {
    uint64_t slot = pair_hash(key) & pair_mask_;
    while (pair_keys_[slot] != kEmptyKey && pair_keys_[slot] != key) slot = (slot + 1) & pair_mask_;
    if (pair_keys_[slot] == kEmptyKey) ++num_merges_;
    pair_keys_[slot] = key;
    pair_values_[slot] = value;
  }
}

BpeModel BpeModel::from_ranks(std::vector<std::string> tokens, std::string_view source) {
  BpeModel model;
  model.set_tokens(std::move(tokens), source);
  model.ignore_merges_ = true;
  std::vector<std::pair<uint64_t, PairValue>> pairs;
  for (uint32_t id = 0; id < model.size(); ++id) {
    if (!model.has(id)) continue;
    const std::string_view bytes = model.token(id);
    for (size_t split = 1; split < bytes.size(); ++split) {
      const auto left = model.find(bytes.substr(0, split));
      if (!left) continue;
      const auto right = model.find(bytes.substr(split));
      if (!right) continue;
      pairs.push_back({(static_cast<uint64_t>(*left) << 32) | *right, PairValue{id, id}});
    }
  }
  model.build_pair_table(std::move(pairs));
  return model;
}

BpeModel BpeModel::from_merges(std::vector<std::string> tokens,
                               const std::vector<std::pair<uint32_t, uint32_t>>& merges, bool ignore_merges,
                               std::string_view source) {
  BpeModel model;
  model.set_tokens(std::move(tokens), source);
  model.ignore_merges_ = ignore_merges;
  std::vector<std::pair<uint64_t, PairValue>> pairs;
  pairs.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto [left, right] = merges[rank];
    TITAN_CHECK(model.has(left) && model.has(right), "{}: merge {} refers to a token id that does not exist", source,
                rank);
    joined.assign(model.token(left));
    joined += model.token(right);
    const auto merged = model.find(joined);
    TITAN_CHECK(merged.has_value(), "{}: merge {} makes a token that is not in the vocabulary", source, rank);
    // A later duplicate of a pair overrides the earlier one, as in Hugging Face's map.
    pairs.push_back({(static_cast<uint64_t>(left) << 32) | right, PairValue{static_cast<uint32_t>(rank), *merged}});
  }
  model.build_pair_table(std::move(pairs));
  return model;
}

std::vector<std::pair<uint32_t, uint32_t>> BpeModel::merges_in_rank_order() const {
  std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> entries;
  entries.reserve(num_merges_);
  for (size_t slot = 0; slot < pair_keys_.size(); ++slot) {
    if (pair_keys_[slot] == kEmptyKey) continue;
    entries.emplace_back(pair_values_[slot].rank, static_cast<uint32_t>(pair_keys_[slot] >> 32),
                         static_cast<uint32_t>(pair_keys_[slot]));
  }
  std::sort(entries.begin(), entries.end());
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  merges.reserve(entries.size());
  for (const auto& [rank, left, right] : entries) merges.emplace_back(left, right);
  return merges;
}

void BpeModel::set_end_of_word_suffix(std::string suffix, std::string_view source) {
  suffix_ = std::move(suffix);
  if (suffix_.empty()) return;
  for (int b = 0; b < 256; ++b) {
    const std::string token = std::string(1, static_cast<char>(b)) + suffix_;
    const auto id = find(token);
    TITAN_CHECK(id.has_value(),
                "{}: model.vocab has no token for the byte 0x{:02X} followed by end_of_word_suffix '{}'; every byte "
                "can end a word",
                source, b, suffix_);
    suffix_byte_ids_[b] = *id;
  }
}

void BpeModel::merge(std::string_view piece, std::vector<uint32_t>& out, BpeWork& work) const {
  const size_t n = piece.size();
  const uint32_t* last_ids = suffix_.empty() ? byte_ids_ : suffix_byte_ids_;
  if (n == 1) {
    out.push_back(last_ids[static_cast<uint8_t>(piece[0])]);
    return;
  }
  work.ids.resize(n);
  for (size_t i = 0; i < n; ++i) work.ids[i] = byte_ids_[static_cast<uint8_t>(piece[i])];
  work.ids[n - 1] = last_ids[static_cast<uint8_t>(piece[n - 1])];
  if (n <= kQuadraticLimit) {
    merge_small(out, work, n);
  } else {
    merge_large(out, work, n);
  }
}

// Repeatedly merges the lowest-ranked adjacent pair, the leftmost on ties.
void BpeModel::merge_small(std::vector<uint32_t>& out, BpeWork& work, size_t n) const {
  uint32_t* ids = work.ids.data();
  work.ranks.resize(n);
  work.merged.resize(n);
  uint32_t* ranks = work.ranks.data();
  uint32_t* merged = work.merged.data();
  auto update = [&](size_t i) {
    const PairValue value = find_pair(ids[i], ids[i + 1]);
    ranks[i] = value.rank;
    merged[i] = value.merged;
  };
  for (size_t i = 0; i + 1 < n; ++i) update(i);
  size_t m = n;
  while (m > 1) {
    uint32_t best = kNoRank;
    size_t k = 0;
    for (size_t i = 0; i + 1 < m; ++i) {
      if (ranks[i] < best) {
        best = ranks[i];
        k = i;
      }
    }
    if (best == kNoRank) break;
    ids[k] = merged[k];
    for (size_t i = k + 1; i + 1 < m; ++i) {
      ids[i] = ids[i + 1];
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --m;
    if (k > 0) update(k - 1);
    if (k + 1 < m) update(k);
  }
  out.insert(out.end(), ids, ids + m);
}

// The same merge order with a min-heap keyed by (rank, position): O(n log n).
void BpeModel::merge_large(std::vector<uint32_t>& out, BpeWork& work, size_t n) const {
  TITAN_CHECK(n < 0xFFFFFFF0u, "BPE: a piece of {} bytes is too long", n);
  constexpr uint32_t kDead = 0xFFFFFFFFu;
  const auto end = static_cast<uint32_t>(n);
  uint32_t* ids = work.ids.data();
  work.prev.resize(n);
  work.next.resize(n);
  uint32_t* prev = work.prev.data();
  uint32_t* next = work.next.data();
  auto& heap = work.heap;
  heap.clear();
  const std::greater<uint64_t> min_heap;
  auto push = [&](uint32_t left) {
    const PairValue value = find_pair(ids[left], ids[next[left]]);
    if (value.rank == kNoRank) return;
    heap.push_back((static_cast<uint64_t>(value.rank) << 32) | left);
    std::push_heap(heap.begin(), heap.end(), min_heap);
  };
  for (uint32_t i = 0; i < end; ++i) {
    prev[i] = i == 0 ? kDead : i - 1;
    next[i] = i + 1;
  }
  for (uint32_t i = 0; i + 1 < end; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), min_heap);
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto rank = static_cast<uint32_t>(top >> 32);
    const auto left = static_cast<uint32_t>(top);
    if (ids[left] == kDead || next[left] >= end) continue;
    const uint32_t right = next[left];
    const PairValue value = find_pair(ids[left], ids[right]);
    if (value.rank != rank) continue;  // stale: one side has merged since
    ids[left] = value.merged;
    ids[right] = kDead;
    next[left] = next[right];
    if (next[left] < end) prev[next[left]] = left;
    if (prev[left] != kDead) push(prev[left]);
    if (next[left] < end) push(left);
  }
  for (uint32_t i = 0; i < end; i = next[i]) out.push_back(ids[i]);
}

}  // namespace titan::data
