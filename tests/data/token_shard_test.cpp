// Token shards and manifests: written and memory-mapped back, and clear errors
// naming the file for truncated, corrupted or foreign files.
#include <gtest/gtest.h>

#include "data/fixtures.h"
#include "data/peer_support.h"
#include "support/expect_error.h"
#include "titan/core/error.h"
#include "titan/data/token_corpus.h"
#include "titan/data/token_shard.h"

namespace titan::data {
namespace token_shard_test {

using titan::testing::expect_error;

TEST(TokenShard, WriteAndMapBack) {
  testing::TempDir dir;
  ShardWriter writer(50000);
  const std::vector<std::vector<uint32_t>> docs = {{1, 2, 3}, {}, {49999}, {7, 7, 7, 7, 7}};
  for (const auto& doc : docs) writer.add_document(doc);
  writer.write(dir / "a.tshard");
  EXPECT_EQ(writer.num_documents(), 0u);  // cleared for the next shard
  const MappedShard shard(dir / "a.tshard");
  EXPECT_EQ(shard.num_documents(), 4u);
  EXPECT_EQ(shard.num_tokens(), 9u);
  EXPECT_EQ(shard.header().vocab_size, 50000u);
  for (size_t d = 0; d < docs.size(); ++d) {
    const auto span = shard.document(d);
    EXPECT_EQ(std::vector<uint32_t>(span.begin(), span.end()), docs[d]);
  }
  EXPECT_THROW(shard.document(4), Error);
  EXPECT_THROW(writer.add_document(std::vector<uint32_t>{50000}), Error);  // outside the vocabulary
}

TEST(TokenShard, EmptyShard) {
  testing::TempDir dir;
  ShardWriter(10).write(dir / "empty.tshard");
  EXPECT_EQ(MappedShard(dir / "empty.tshard").num_documents(), 0u);
}

TEST(TokenShard, CorruptFilesAreClearErrors) {
  testing::TempDir dir;
  ShardWriter writer(1000);
  for (uint32_t d = 0; d < 20; ++d) writer.add_document(std::vector<uint32_t>(30, d));
  writer.write(dir / "good.tshard");
  const std::string good = testing::read_bytes(dir / "good.tshard");

  testing::write_bytes(dir / "truncated.tshard", good.substr(0, good.size() - 100));
  expect_error([&] { MappedShard(dir / "truncated.tshard"); }, {"truncated.tshard", "truncated"});
  testing::write_bytes(dir / "tiny.tshard", good.substr(0, 10));
  expect_error([&] { MappedShard(dir / "tiny.tshard"); }, {"tiny.tshard", "shorter than"});
  std::string flipped = good;
  flipped[64 + 4 * 100] ^= 1;  // a token bit
  testing::write_bytes(dir / "flipped.tshard", flipped);
  expect_error([&] { MappedShard(dir / "flipped.tshard"); }, {"flipped.tshard", "checksum"});
  EXPECT_NO_THROW(MappedShard(dir / "flipped.tshard", /*verify_checksum=*/false));
  std::string header = good;
  header[20] ^= 1;  // the token count
  testing::write_bytes(dir / "header.tshard", header);
  expect_error([&] { MappedShard(dir / "header.tshard"); }, {"header.tshard", "header checksum"});
  testing::write_bytes(dir / "text.tshard", std::string(200, 'x'));
  expect_error([&] { MappedShard(dir / "text.tshard"); }, {"text.tshard", "bad magic"});
  expect_error([&] { MappedShard(dir / "missing.tshard"); }, {"missing.tshard", "cannot open"});
}

TEST(TokenShard, ManifestErrors) {
  testing::TempDir dir;
  testing::write_token_dataset(dir / "set", {{1, 2}, {3}}, 10, 8, 9);
  const TokenCorpus corpus({(dir / "set").string()}, {});
  EXPECT_EQ(corpus.num_documents(), 2u);
  EXPECT_EQ(corpus.bos_id(), 8u);
  EXPECT_EQ(corpus.eos_id(), 9u);
  std::filesystem::remove(dir / "set" / "shard_0.tshard");
  expect_error([&] { TokenCorpus({(dir / "set").string()}, {}); }, {"shard_0.tshard"});
  testing::write_bytes(dir / "set" / "manifest.json", "{\"format\": \"titan-token-shards\", \"version\": 1}");
  expect_error([&] { TokenCorpus({(dir / "set").string()}, {}); }, {"manifest.json", "vocab_size"});
  testing::write_bytes(dir / "set" / "manifest.json", "{");
  expect_error([&] { TokenCorpus({(dir / "set").string()}, {}); }, {"manifest.json", "not valid JSON"});
}

}  // namespace token_shard_test
}  // namespace titan::data
