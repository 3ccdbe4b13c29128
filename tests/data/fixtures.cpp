#include "data/fixtures.h"

#include "titan/data/token_corpus.h"
#include "titan/data/token_shard.h"

namespace titan::data::testing {

void write_token_dataset(const std::filesystem::path& dir, const std::vector<std::vector<uint32_t>>& documents,
                         uint32_t vocab_size, std::optional<uint32_t> bos, std::optional<uint32_t> eos,
                         uint64_t shard_tokens) {
  std::filesystem::create_directories(dir);
  ShardManifest manifest;
  manifest.tokenizer = "none";
  manifest.vocab_size = vocab_size;
  manifest.bos = bos;
  manifest.eos = eos;
  ShardWriter writer(vocab_size);
  auto flush = [&] {
    const std::string name = "shard_" + std::to_string(manifest.shards.size()) + ".tshard";
    manifest.documents += writer.num_documents();
    manifest.tokens += writer.num_tokens();
    writer.write(dir / name);
    manifest.shards.push_back(name);
  };
  for (const auto& document : documents) {
    writer.add_document(document);
    if (writer.num_tokens() >= shard_tokens) flush();
  }
  if (writer.num_documents() > 0) flush();
  write_shard_manifest(dir / ShardManifest::kFileName, manifest);
}

std::vector<std::vector<uint32_t>> numbered_documents(size_t count, size_t max_length, uint64_t seed) {
  std::vector<std::vector<uint32_t>> documents(count);
  uint64_t state = seed;
  for (size_t d = 0; d < count; ++d) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const size_t length = 1 + (state >> 33) % max_length;
    for (size_t i = 0; i < length; ++i) documents[d].push_back(static_cast<uint32_t>(1000 * d + 1 + i));
  }
  return documents;
}

Rows batch_rows(const Batch& batch) {
  Rows out;
  const auto ids = batch.input_ids.to_ints(), labels = batch.labels.to_ints();
  const auto positions = batch.positions.to_ints(), documents = batch.document_ids.to_ints();
  const int64_t seq = batch.input_ids.size(1);
  for (int64_t r = 0; r < batch.input_ids.size(0); ++r) {
    std::vector<int64_t> row(ids.begin() + r * seq, ids.begin() + (r + 1) * seq);
    row.insert(row.end(), labels.begin() + r * seq, labels.begin() + (r + 1) * seq);
    row.insert(row.end(), positions.begin() + r * seq, positions.begin() + (r + 1) * seq);
    row.insert(row.end(), documents.begin() + r * seq, documents.begin() + (r + 1) * seq);
    out.push_back(std::move(row));
  }
  return out;
}

Row next_row(PackedStream& stream, int64_t seq_len) {
  Row row;
  row.inputs.resize(seq_len);
  row.labels.resize(seq_len);
  row.positions.resize(seq_len);
  row.documents.resize(seq_len);
  row.real = stream.next_row(seq_len, row.inputs.data(), row.labels.data(), row.positions.data(), row.documents.data());
  return row;
}

}  // namespace titan::data::testing
