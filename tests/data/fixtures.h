// Small datasets for the packing and loader tests: documents of known tokens
// written as shards with a manifest, and a batch flattened for comparison.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "titan/data/data_loader.h"

namespace titan::data::testing {

// Writes `documents` as shards of at most `shard_tokens` tokens into `dir`
// with a manifest.json (vocab, BOS, EOS as given).
void write_token_dataset(const std::filesystem::path& dir, const std::vector<std::vector<uint32_t>>& documents,
                         uint32_t vocab_size, std::optional<uint32_t> bos, std::optional<uint32_t> eos,
                         uint64_t shard_tokens = 1000);

// `count` documents; document d holds tokens 1000*d+1, 1000*d+2, ... (lengths 1..max_length < 1000),
// so a token names its document; the vocabulary needs 1000 * count + 1000 ids.
std::vector<std::vector<uint32_t>> numbered_documents(size_t count, size_t max_length, uint64_t seed = 1);

using Rows = std::vector<std::vector<int64_t>>;

// Each row of a batch as one vector: its input ids, labels, positions and
// document ids concatenated, so two batches compare row by row.
Rows batch_rows(const Batch& batch);

// One row of a packed stream, as PackedStream::next_row fills it.
struct Row {
  std::vector<int64_t> inputs, labels, positions, documents;
  int64_t real = 0;  // non-padding tokens
};
Row next_row(PackedStream& stream, int64_t seq_len);

}  // namespace titan::data::testing
