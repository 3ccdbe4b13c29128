// Loss masks through the pipeline: token shards carrying a mask (version 2;
// version 1 still loads, a damaged mask table is refused), whole-document
// packing with masked labels on hand-checked rows, exact resume and disjoint
// ranks, the overlong policy applied to prepared shards, and
// `titan data prepare --chat` giving the loader what the in-memory path gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "data/fixtures.h"
#include "data/peer_support.h"
#include "support/expect_error.h"
#include "titan/core/error.h"
#include "titan/data/data_loader.h"
#include "titan/data/hashing.h"
#include "titan/data/token_shard.h"

namespace titan::data {
namespace chat_packing_test {

using testing::batch_rows;
using testing::Rows;
using testing::shell_quote;

constexpr uint32_t kPad = 999;

// One 0/1 byte per token, from a fixed generator; token 0 untrained (like a chat's BOS).
std::vector<std::vector<uint8_t>> masks_for(const std::vector<std::vector<uint32_t>>& documents, uint64_t seed) {
  std::vector<std::vector<uint8_t>> masks;
  uint64_t state = seed;
  for (const auto& document : documents) {
    std::vector<uint8_t> mask(document.size());
    for (size_t i = 1; i < mask.size(); ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      mask[i] = (state >> 40) % 3 != 0;
    }
    masks.push_back(std::move(mask));
  }
  return masks;
}

// A chat dataset folder as `titan data prepare --chat` writes one.
void write_chat_dataset(const std::filesystem::path& dir, const std::vector<std::vector<uint32_t>>& documents,
                        const std::vector<std::vector<uint8_t>>& masks, uint32_t vocab, uint64_t shard_tokens = 1000) {
  std::filesystem::create_directories(dir);
  ShardManifest manifest;
  manifest.tokenizer = "none";
  manifest.vocab_size = vocab;
  manifest.bos = 0;
  manifest.eos = kPad;
  manifest.chat = true;
  manifest.chat_template = "test";
  manifest.train_on = "assistant";
  ShardWriter writer(vocab, /*loss_mask=*/true);
  auto flush = [&] {
    const std::string name = "shard_" + std::to_string(manifest.shards.size()) + ".tshard";
    manifest.documents += writer.num_documents();
    manifest.tokens += writer.num_tokens();
    writer.write(dir / name);
    manifest.shards.push_back(name);
  };
  for (size_t d = 0; d < documents.size(); ++d) {
    writer.add_document(documents[d], masks[d]);
    if (writer.num_tokens() >= shard_tokens) flush();
  }
  if (writer.num_documents() > 0) flush();
  write_shard_manifest(dir / ShardManifest::kFileName, manifest);
}

std::shared_ptr<const TokenCorpus> chat_corpus(const std::filesystem::path& dir, uint64_t max_tokens = 0,
                                               ChatOverlong overlong = ChatOverlong::truncate) {
  TokenCorpus::Options options;
  options.chat = ChatOptions{};
  options.chat->max_tokens = max_tokens;
  options.chat->overlong = overlong;
  return std::make_shared<const TokenCorpus>(std::vector<std::string>{dir.string()}, options);
}

using titan::testing::expect_error;

// ---- shards ----

template <typename T>
void put(std::string& bytes, size_t at, T value) {
  std::memcpy(bytes.data() + at, &value, sizeof(T));
}

// A version-1 shard built from the layout in token_shard.h, not by ShardWriter.
std::string v1_shard_bytes(const std::vector<std::vector<uint32_t>>& documents, uint32_t vocab) {
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> ends;
  for (const auto& document : documents) {
    tokens.insert(tokens.end(), document.begin(), document.end());
    ends.push_back(tokens.size());
  }
  const size_t ends_at = (64 + 4 * tokens.size() + 7) / 8 * 8;
  std::string bytes(ends_at + 8 * ends.size(), '\0');
  std::memcpy(bytes.data(), "TITANTOK", 8);
  put<uint32_t>(bytes, 8, 1);
  put<uint32_t>(bytes, 12, 64);
  put<uint64_t>(bytes, 16, tokens.size());
  put<uint64_t>(bytes, 24, ends.size());
  put<uint32_t>(bytes, 32, vocab);
  const uint64_t a = hash_bytes(tokens.data(), tokens.size() * 4, 0x746F6B656E73ull);
  const uint64_t b = hash_bytes(ends.data(), ends.size() * 8, 0x656E6473ull);
  put<uint64_t>(bytes, 40, hash_mix(a ^ (b * 0x9E3779B97F4A7C15ull)));
  put<uint64_t>(bytes, 48, hash_bytes(bytes.data(), 48));
  std::memcpy(bytes.data() + 64, tokens.data(), tokens.size() * 4);
  std::memcpy(bytes.data() + ends_at, ends.data(), ends.size() * 8);
  return bytes;
}

TEST(ChatShard, MaskRoundTripsAndVersionOneStillLoads) {
  testing::TempDir dir;
  const auto docs = testing::numbered_documents(20, 30, 5);
  const auto masks = masks_for(docs, 7);
  ShardWriter writer(30000, true);
  for (size_t d = 0; d < docs.size(); ++d) writer.add_document(docs[d], masks[d]);
  writer.write(dir / "masked.tshard");
  MappedShard masked(dir / "masked.tshard");
  EXPECT_EQ(masked.header().version, 2u);
  EXPECT_TRUE(masked.has_loss_mask());
  ASSERT_EQ(masked.num_documents(), docs.size());
  for (size_t d = 0; d < docs.size(); ++d) {
    const auto tokens = masked.document(d);
    const auto mask = masked.loss_mask(d);
    EXPECT_EQ(std::vector<uint32_t>(tokens.begin(), tokens.end()), docs[d]);
    EXPECT_EQ(std::vector<uint8_t>(mask.begin(), mask.end()), masks[d]);
  }
  // Without a mask the writer still writes version 1, byte for byte the
  // layout older titans wrote, and a hand-built version-1 file loads.
  ShardWriter plain(30000);
  for (const auto& doc : docs) plain.add_document(doc);
  plain.write(dir / "plain.tshard");
  EXPECT_EQ(testing::read_bytes(dir / "plain.tshard"), v1_shard_bytes(docs, 30000));
  testing::write_bytes(dir / "v1.tshard", v1_shard_bytes(docs, 30000));
  MappedShard v1(dir / "v1.tshard");
  EXPECT_EQ(v1.header().version, 1u);
  EXPECT_FALSE(v1.has_loss_mask());
  EXPECT_TRUE(v1.loss_mask(3).empty());
  EXPECT_EQ(std::vector<uint32_t>(v1.document(3).begin(), v1.document(3).end()), docs[3]);
  // A mask of the wrong length, or a byte that is not 0/1, is refused when written.
  ShardWriter bad(30000, true);
  EXPECT_THROW(bad.add_document(docs[0], std::vector<uint8_t>(docs[0].size() + 1, 0)), Error);
  EXPECT_THROW(bad.add_document(docs[0], std::vector<uint8_t>(docs[0].size(), 2)), Error);
  EXPECT_THROW(bad.add_document(docs[0]), Error);
}

TEST(ChatShard, DamagedMaskTableIsRefused) {
  testing::TempDir dir;
  const auto docs = testing::numbered_documents(10, 30, 6);
  const auto masks = masks_for(docs, 8);
  ShardWriter writer(30000, true);
  for (size_t d = 0; d < docs.size(); ++d) writer.add_document(docs[d], masks[d]);
  writer.write(dir / "good.tshard");
  const std::string good = testing::read_bytes(dir / "good.tshard");
  auto refuse = [&](const std::string& bytes, std::initializer_list<std::string> fragments) {
    testing::write_bytes(dir / "bad.tshard", bytes);
    expect_error([&] { MappedShard shard(dir / "bad.tshard"); }, fragments);
  };
  // A flipped mask byte: the payload checksum covers the mask.
  std::string flipped = good;
  flipped.back() ^= 1;
  refuse(flipped, {"bad.tshard", "checksum mismatch"});
  // A cut mask table: the header's size (which counts the table) disagrees.
  refuse(good.substr(0, good.size() - 1), {"bad.tshard", "a loss mask", "truncated"});
  // The mask flag on a file without the table (a version-1 body claiming one).
  std::string claimed = v1_shard_bytes(docs, 30000);
  put<uint32_t>(claimed, 8, 2);
  put<uint32_t>(claimed, 36, ShardHeader::kFlagLossMask);
  put<uint64_t>(claimed, 48, hash_bytes(claimed.data(), 48));
  refuse(claimed, {"bad.tshard", "truncated"});
  // Flags a version-1 shard cannot have, and flags no version knows.
  std::string v1_flags = v1_shard_bytes(docs, 30000);
  put<uint32_t>(v1_flags, 36, ShardHeader::kFlagLossMask);
  put<uint64_t>(v1_flags, 48, hash_bytes(v1_flags.data(), 48));
  refuse(v1_flags, {"bad.tshard", "unknown flags"});
  std::string unknown = good;
  put<uint32_t>(unknown, 36, 6);
  put<uint64_t>(unknown, 48, hash_bytes(unknown.data(), 48));
  refuse(unknown, {"bad.tshard", "unknown flags"});
  // The flag without a recomputed header checksum.
  std::string unsummed = good;
  put<uint32_t>(unsummed, 36, 0);
  refuse(unsummed, {"bad.tshard", "header checksum"});
}

// ---- packing ----

using testing::next_row;
using testing::Row;

PackedStream::Options whole(bool repeat = true, bool shuffle = false) {
  PackedStream::Options o;
  o.shuffle = shuffle;
  o.repeat = repeat;
  o.whole_documents = true;
  o.pad_id = kPad;
  return o;
}

TEST(ChatPacking, HandCheckedRowsMaskLabelsAndKeepDocumentsWhole) {
  testing::TempDir dir;
  write_chat_dataset(dir.path(), {{10, 11, 12, 13}, {20, 21, 22}}, {{0, 0, 1, 1}, {0, 1, 0}}, 1000);
  const auto corpus = chat_corpus(dir.path());
  ASSERT_TRUE(corpus->is_chat());
  {
    PackedStream stream(corpus, {0, 1}, whole(false));
    const Row row = next_row(stream, 8);
    EXPECT_EQ(row.real, 7);
    EXPECT_EQ(row.inputs, (std::vector<int64_t>{10, 11, 12, 13, 20, 21, 22, kPad}));
    // Position t's label is token t + 1, kept only when that token is trained.
    EXPECT_EQ(row.labels, (std::vector<int64_t>{-100, 12, 13, -100, 21, -100, -100, -100}));
    EXPECT_EQ(row.positions, (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 0}));
    EXPECT_EQ(row.documents, (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 2}));
    EXPECT_TRUE(stream.exhausted());
  }
  {
    // The second document does not fit in the 2 tokens left: it starts the next row.
    PackedStream stream(corpus, {0, 1}, whole(false));
    EXPECT_EQ(stream.rows_left(6), 2u);
    const Row a = next_row(stream, 6);
    EXPECT_EQ(a.real, 4);
    EXPECT_EQ(a.inputs, (std::vector<int64_t>{10, 11, 12, 13, kPad, kPad}));
    EXPECT_EQ(a.labels, (std::vector<int64_t>{-100, 12, 13, -100, -100, -100}));
    EXPECT_EQ(a.positions, (std::vector<int64_t>{0, 1, 2, 3, 0, 1}));
    EXPECT_EQ(a.documents, (std::vector<int64_t>{0, 0, 0, 0, 1, 1}));
    const Row b = next_row(stream, 6);
    EXPECT_EQ(b.real, 3);
    EXPECT_EQ(b.inputs, (std::vector<int64_t>{20, 21, 22, kPad, kPad, kPad}));
    EXPECT_EQ(b.labels, (std::vector<int64_t>{21, -100, -100, -100, -100, -100}));
    EXPECT_TRUE(stream.exhausted());
  }
  {
    // Masks without whole-document packing: labels are masked all the same,
    // and never cross into the next document.
    PackedStream::Options o = whole(false);
    o.whole_documents = false;
    PackedStream stream(corpus, {0, 1}, o);
    const Row row = next_row(stream, 6);
    EXPECT_EQ(row.inputs, (std::vector<int64_t>{10, 11, 12, 13, 20, 21}));
    EXPECT_EQ(row.labels, (std::vector<int64_t>{-100, 12, 13, -100, 21, -100}));
  }
}

TEST(ChatPacking, WholeDocumentsOverManyRowsAndSkipEqualsRead) {
  testing::TempDir dir;
  constexpr int64_t kSeq = 24;
  const auto docs = testing::numbered_documents(120, kSeq, 3);
  const auto masks = masks_for(docs, 4);
  write_chat_dataset(dir.path(), docs, masks, 130000, 300);
  const auto corpus = chat_corpus(dir.path());
  std::vector<uint64_t> all(docs.size());
  for (uint64_t i = 0; i < all.size(); ++i) all[i] = i;
  PackedStream stream(corpus, all, whole(true, true));
  std::map<uint64_t, int> seen;  // document -> times seen whole
  uint64_t rows = 0;
  while (stream.cursor().epoch == 0) {
    const Row row = next_row(stream, kSeq);
    ++rows;
    for (int64_t i = 0; i < kSeq;) {
      int64_t end = i;
      while (end < kSeq && row.documents[end] == row.documents[i]) ++end;
      if (i < row.real) {
        // A group of real tokens is one whole document, from its first token.
        const uint64_t d = static_cast<uint64_t>(row.inputs[i] / 1000);
        ASSERT_EQ(end - i, static_cast<int64_t>(docs[d].size())) << "row " << rows << " splits document " << d;
        for (int64_t t = i; t < end; ++t) {
          EXPECT_EQ(row.inputs[t], docs[d][t - i]);
          EXPECT_EQ(row.positions[t], t - i);
          const bool trained = t + 1 < end && masks[d][t - i + 1] == 1;
          EXPECT_EQ(row.labels[t], trained ? row.inputs[t + 1] : kIgnoreIndex);
        }
        ++seen[d];
      } else {
        ASSERT_EQ(end, kSeq);  // padding only at the end of the row
        for (int64_t t = i; t < end; ++t) {
          EXPECT_EQ(row.inputs[t], kPad);
          EXPECT_EQ(row.labels[t], kIgnoreIndex);
        }
      }
      i = end;
    }
  }
  EXPECT_EQ(seen.size(), docs.size());
  for (const auto& [d, times] : seen) EXPECT_EQ(times, 1) << d;
  // Skipping rows lands where reading them does, across epochs.
  for (uint64_t skip : {uint64_t{1}, uint64_t{7}, rows - 1, rows + 5}) {
    PackedStream read(corpus, all, whole(true, true)), skipped(corpus, all, whole(true, true));
    for (uint64_t i = 0; i < skip; ++i) next_row(read, kSeq);
    skipped.skip_rows(skip, kSeq);
    EXPECT_EQ(read.cursor(), skipped.cursor()) << skip;
    EXPECT_EQ(next_row(read, kSeq).inputs, next_row(skipped, kSeq).inputs) << skip;
  }
}

class ChatLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    docs_ = testing::numbered_documents(200, 40, 11);
    masks_ = masks_for(docs_, 12);
    write_chat_dataset(dir_.path(), docs_, masks_, 201000, 2000);
  }
  DataLoaderConfig config(int64_t batch = 4, int64_t rank = 0, int64_t world = 1) const {
    DataLoaderConfig c;
    c.paths = {dir_.path().string()};
    c.seq_len = 48;
    c.local_batch = batch;
    c.seed = 77;
    c.dp_rank = rank;
    c.dp_world = world;
    c.validation_fraction = 0.1;
    c.chat = ChatOptions{};
    return c;
  }
  testing::TempDir dir_;
  std::vector<std::vector<uint32_t>> docs_;
  std::vector<std::vector<uint8_t>> masks_;
};

TEST_F(ChatLoaderTest, LabelTokensCountOnlyTrainedLabels) {
  DataLoader loader(config());
  for (int step = 0; step < 5; ++step) {
    const Batch batch = loader.next_batch();
    const auto inputs = batch.input_ids.to_ints(), labels = batch.labels.to_ints();
    const auto documents = batch.document_ids.to_ints();
    int64_t trained = 0;
    for (size_t i = 0; i < labels.size(); ++i) {
      if (labels[i] == kIgnoreIndex) continue;
      ++trained;
      // A kept label is the next token of the same document, and that token is trained.
      ASSERT_EQ(i % 48 + 1 < 48, true);
      EXPECT_EQ(labels[i], inputs[i + 1]);
      EXPECT_EQ(documents[i], documents[i + 1]);
      const auto d = static_cast<uint64_t>(inputs[i + 1] / 1000);
      const auto t = static_cast<uint64_t>(inputs[i + 1] % 1000 - 1);
      EXPECT_EQ(masks_[d][t], 1);
    }
    EXPECT_EQ(batch.label_tokens, trained);
    EXPECT_GT(trained, 0);
  }
}

TEST_F(ChatLoaderTest, ResumeFromStateDictYieldsTheSameBatches) {
  DataLoader full(config());
  std::vector<Rows> expected;
  nlohmann::json state;
  for (int step = 0; step < 9; ++step) {
    if (step == 4) state = full.state_dict();
    expected.push_back(batch_rows(full.next_batch()));
  }
  DataLoader resumed(config());
  resumed.load_state_dict(state);
  for (int step = 4; step < 9; ++step) EXPECT_EQ(batch_rows(resumed.next_batch()), expected[step]) << step;
  // A state saved by packing across documents is not this loader's.
  nlohmann::json other = state;
  other["whole_documents"] = false;
  EXPECT_THROW(resumed.load_state_dict(other), Error);
}

TEST_F(ChatLoaderTest, RanksAreDisjointAndCoverTheSingleRankData) {
  DataLoader single(config(4, 0, 1));
  DataLoader rank0(config(2, 0, 2)), rank1(config(2, 1, 2));
  for (int step = 0; step < 6; ++step) {
    const Rows all = batch_rows(single.next_batch());
    Rows both = batch_rows(rank0.next_batch());
    const Rows second = batch_rows(rank1.next_batch());
    both.insert(both.end(), second.begin(), second.end());
    EXPECT_EQ(both, all) << step;
  }
}

TEST_F(ChatLoaderTest, ValidationCoversEveryHeldOutConversationOnce) {
  DataLoader loader(config(2, 0, 1));
  ValidationIterator pass = loader.validation();
  std::multiset<int64_t> firsts;
  Batch batch;
  int64_t batches = 0;
  while (pass.next(batch)) {
    ++batches;
    const auto inputs = batch.input_ids.to_ints(), positions = batch.positions.to_ints();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (positions[i] == 0 && inputs[i] != kPad) firsts.insert(inputs[i] / 1000);
    }
  }
  EXPECT_EQ(batches, pass.num_batches());
  std::multiset<int64_t> expected;
  for (uint64_t d : loader.validation_documents()) expected.insert(static_cast<int64_t>(d));
  EXPECT_EQ(firsts, expected);
}

TEST_F(ChatLoaderTest, OverlongPolicyAppliesToPreparedShards) {
  // seq_len 16 against conversations up to 40 tokens long.
  for (ChatOverlong overlong : {ChatOverlong::truncate, ChatOverlong::drop}) {
    const auto corpus = chat_corpus(dir_.path(), 16, overlong);
    uint64_t expect_truncated = 0, expect_dropped = 0, expect_kept = 0;
    for (size_t d = 0; d < docs_.size(); ++d) {
      if (docs_[d].size() <= 16) {
        ++expect_kept;
      } else if (overlong == ChatOverlong::truncate &&
                 std::find(masks_[d].begin() + 1, masks_[d].begin() + 16, 1) != masks_[d].begin() + 16) {
        ++expect_truncated;
        ++expect_kept;
      } else {
        ++expect_dropped;
      }
    }
    EXPECT_EQ(corpus->chat_stats().truncated, expect_truncated);
    EXPECT_EQ(corpus->chat_stats().dropped, expect_dropped);
    ASSERT_EQ(corpus->num_documents(), expect_kept);
    uint64_t tokens = 0;
    for (uint64_t d = 0; d < corpus->num_documents(); ++d) {
      const auto document = corpus->document(d);
      const auto mask = corpus->loss_mask(d);
      ASSERT_LE(document.size(), 16u);
      ASSERT_EQ(mask.size(), document.size());
      const auto source = static_cast<uint64_t>(document[0] / 1000);
      EXPECT_TRUE(std::equal(document.begin(), document.end(), docs_[source].begin()));
      EXPECT_TRUE(std::equal(mask.begin(), mask.end(), masks_[source].begin()));
      tokens += document.size();
    }
    EXPECT_EQ(corpus->num_tokens(), tokens);
    EXPECT_EQ(corpus->chat_stats().tokens, tokens);
  }
}

TEST_F(ChatLoaderTest, ChatAndPlainDataAreNotMixedUp) {
  DataLoaderConfig plain = config();
  plain.chat.reset();
  expect_error([&] { DataLoader loader(plain); }, {"chat.enable"});
  testing::TempDir text;
  testing::write_token_dataset(text.path(), docs_, 201000, 0, kPad);
  DataLoaderConfig chat = config();
  chat.paths = {text.path().string()};
  expect_error([&] { DataLoader loader(chat); }, {"chat.enable", "--chat"});
  DataLoaderConfig all = config();
  all.chat->train_on = ChatTrainOn::all;
  expect_error([&] { DataLoader loader(all); }, {"chat.train_on"});
}

// ---- titan data prepare --chat ----

TEST(ChatPrepare, CliShardsMatchTheInMemoryPath) {
  testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 60; ++i) {
    std::string answer;
    for (int w = 0; w < i % 13; ++w) answer += fmt::format(" word{}", w * i);
    text += fmt::format(R"({{"messages": [{{"role": "system", "content": "Be brief."}}, {{"role": "user", )"
                        R"("content": "question {}"}}, {{"role": "assistant", "content": "answer{}"}}]}})",
                        i, answer) +
            "\n";
    if (i % 5 == 0) text += fmt::format(R"({{"prompt": "p{}", "completion": "c{}"}})", i, i) + "\n";
  }
  testing::write_bytes(dir / "chat.jsonl", text);
  const auto prepared = testing::run_titan("data prepare --chat --input " + shell_quote((dir / "chat.jsonl").string()) +
                                           " --tokenizer llama3 --chat-template llama3 --seq-len 40 --overlong drop "
                                           "--shard-tokens 500 --output " +
                                           shell_quote((dir / "shards").string()));
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  const ShardManifest manifest = read_shard_manifest(dir / "shards" / ShardManifest::kFileName);
  EXPECT_TRUE(manifest.chat);
  EXPECT_EQ(manifest.train_on, "assistant");
  EXPECT_NE(manifest.chat_template.find("llama3"), std::string::npos);
  EXPECT_GT(manifest.shards.size(), 1u);

  TokenCorpus::Options options;
  options.chat = ChatOptions{};
  options.chat->chat_template = "llama3";
  options.chat->max_tokens = 40;
  options.chat->overlong = ChatOverlong::drop;
  const TokenCorpus from_shards({(dir / "shards").string()}, options);
  options.tokenizer = "llama3";
  const TokenCorpus in_memory({(dir / "chat.jsonl").string()}, options);
  ASSERT_EQ(from_shards.num_documents(), in_memory.num_documents());
  EXPECT_GT(in_memory.chat_stats().dropped, 0u);
  EXPECT_NE(prepared.output.find(fmt::format("{} dropped", in_memory.chat_stats().dropped)), std::string::npos)
      << prepared.output;
  EXPECT_NE(prepared.output.find(in_memory.chat_stats().summary()), std::string::npos) << prepared.output;
  for (uint64_t d = 0; d < in_memory.num_documents(); ++d) {
    const auto a = from_shards.document(d), b = in_memory.document(d);
    ASSERT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << d;
    const auto ma = from_shards.loss_mask(d), mb = in_memory.loss_mask(d);
    ASSERT_TRUE(std::equal(ma.begin(), ma.end(), mb.begin(), mb.end())) << d;
  }

  // The loader's batches agree as well.
  DataLoaderConfig config;
  config.seq_len = 40;
  config.local_batch = 3;
  config.chat = ChatOptions{};
  config.chat->chat_template = "llama3";
  config.chat->overlong = ChatOverlong::drop;
  config.paths = {(dir / "shards").string()};
  DataLoader shards(config);
  config.paths = {(dir / "chat.jsonl").string()};
  config.tokenizer = "llama3";
  DataLoader raw(config);
  for (int step = 0; step < 4; ++step) EXPECT_EQ(batch_rows(shards.next_batch()), batch_rows(raw.next_batch())) << step;

  // --chat needs a tokenizer; a bad line names file:line; a bad --train-on names the flag.
  const auto untrained =
      testing::run_titan("data prepare --chat --input " + shell_quote((dir / "chat.jsonl").string()) + " --output " +
                         shell_quote((dir / "none").string()));
  EXPECT_NE(untrained.exit_code, 0);
  EXPECT_NE(untrained.output.find("--tokenizer"), std::string::npos) << untrained.output;
  testing::write_bytes(dir / "bad.jsonl", text + R"({"messages": [{"role": "robot", "content": "x"}]})" + "\n");
  const auto bad =
      testing::run_titan("data prepare --chat --input " + shell_quote((dir / "bad.jsonl").string()) +
                         " --tokenizer llama3 --chat-template llama3 --output " + shell_quote((dir / "bad").string()));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find((dir / "bad.jsonl").string() + ":" + std::to_string(60 + 12 + 1) + ":"), std::string::npos)
      << bad.output;
  const auto flag =
      testing::run_titan("data prepare --chat --input " + shell_quote((dir / "chat.jsonl").string()) +
                         " --tokenizer llama3 --train-on everything --output " + shell_quote((dir / "flag").string()));
  EXPECT_NE(flag.exit_code, 0);
  EXPECT_NE(flag.output.find("--train-on"), std::string::npos) << flag.output;
}

}  // namespace chat_packing_test
}  // namespace titan::data
