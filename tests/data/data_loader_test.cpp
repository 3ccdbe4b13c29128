// The loader: data-parallel ranks see disjoint rows whose union is the
// single-rank data, a loader restored from state_dict yields exactly the
// batches the uninterrupted one would, and the validation split is held out.
#include <gtest/gtest.h>

#include <set>

#include "data/fixtures.h"
#include "data/peer_support.h"
#include "titan/core/error.h"
#include "titan/data/data_loader.h"

namespace titan::data {
namespace data_loader_test {

using testing::batch_rows;
using testing::Rows;

class DataLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_token_dataset(dir_.path(), testing::numbered_documents(300, 90, 2), 301000, 0, 999, 4000);
  }
  DataLoaderConfig config(int64_t batch = 4, int64_t rank = 0, int64_t world = 1) const {
    DataLoaderConfig c;
    c.paths = {dir_.path().string()};
    c.seq_len = 32;
    c.local_batch = batch;
    c.seed = 1234;
    c.dp_rank = rank;
    c.dp_world = world;
    c.validation_fraction = 0.1;
    c.document_masking = true;
    return c;
  }
  testing::TempDir dir_;
};

TEST_F(DataLoaderTest, BatchShapesAndTypes) {
  DataLoader loader(config());
  const Batch batch = loader.next_batch();
  for (const Tensor* t : {&batch.input_ids, &batch.labels, &batch.positions, &batch.document_ids}) {
    EXPECT_EQ(t->shape(), (Shape{4, 32}));
    EXPECT_EQ(t->dtype(), DType::i64);
    EXPECT_EQ(t->device(), Device::cpu());
  }
  EXPECT_EQ(batch.step, 0);
  EXPECT_EQ(batch.real_tokens, 4 * 32);
  int64_t counted = 0;
  for (int64_t label : batch.labels.to_ints()) counted += label != -100;
  EXPECT_EQ(batch.label_tokens, counted);
  EXPECT_LT(batch.label_tokens, batch.real_tokens);  // document masking ignores each document's last label
  EXPECT_EQ(loader.next_batch().step, 1);
  EXPECT_EQ(loader.vocab_size(), 301000u);
}

TEST_F(DataLoaderTest, RanksAreDisjointAndCoverTheSingleRankData) {
  DataLoader single(config(6, 0, 1));
  std::vector<std::unique_ptr<DataLoader>> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(std::make_unique<DataLoader>(config(2, r, 3)));
  // 40 steps of 6 rows of 32 tokens run through several epochs of ~14K tokens.
  for (int step = 0; step < 40; ++step) {
    const Rows expected = batch_rows(single.next_batch());
    Rows together;
    for (auto& rank : ranks) {
      const Rows mine = batch_rows(rank->next_batch());
      together.insert(together.end(), mine.begin(), mine.end());
    }
    ASSERT_EQ(together, expected) << "step " << step;
  }
  // Disjoint: no row (as tokens, which name their document and offset) repeats within an epoch's worth.
  DataLoader a(config(2, 0, 2)), b(config(2, 1, 2));
  std::set<std::vector<int64_t>> seen;
  for (int step = 0; step < 20; ++step) {
    for (auto& row : batch_rows(a.next_batch())) EXPECT_TRUE(seen.insert(row).second);
    for (auto& row : batch_rows(b.next_batch())) EXPECT_TRUE(seen.insert(row).second);
  }
}

TEST_F(DataLoaderTest, ResumeFromStateDictYieldsTheSameBatches) {
  for (int prefetch : {0, 2}) {
    DataLoaderConfig c = config(3);
    c.prefetch = prefetch;
    DataLoader uninterrupted(c);
    std::vector<Rows> expected;
    nlohmann::json saved;
    for (int step = 0; step < 60; ++step) {  // ~4 epochs: resumes cross epoch boundaries
      if (step == 23) saved = uninterrupted.state_dict();
      expected.push_back(batch_rows(uninterrupted.next_batch()));
    }
    DataLoader resumed(c);
    resumed.next_batch();  // consume something first: loading must reset it
    resumed.load_state_dict(saved);
    EXPECT_EQ(resumed.state_dict(), saved);
    for (int step = 23; step < 60; ++step) {
      const Batch batch = resumed.next_batch();
      EXPECT_EQ(batch.step, step);
      ASSERT_EQ(batch_rows(batch), expected[static_cast<size_t>(step)]) << "prefetch " << prefetch << " step " << step;
    }
  }
}

TEST_F(DataLoaderTest, StateSurvivesAChangeOfWorldSize) {
  DataLoader one(config(4, 0, 1));
  for (int i = 0; i < 5; ++i) one.next_batch();
  const nlohmann::json state = one.state_dict();
  const Rows expected = batch_rows(one.next_batch());
  DataLoader r0(config(2, 0, 2)), r1(config(2, 1, 2));
  r0.load_state_dict(state);
  r1.load_state_dict(state);
  Rows together = batch_rows(r0.next_batch());
  const Rows second = batch_rows(r1.next_batch());
  together.insert(together.end(), second.begin(), second.end());
  EXPECT_EQ(together, expected);
}

TEST_F(DataLoaderTest, SeedsChangeTheOrder) {
  DataLoaderConfig c = config();
  DataLoader a(c), b(c);
  c.seed = 99;
  DataLoader other(c);
  const Rows first = batch_rows(a.next_batch());
  EXPECT_EQ(first, batch_rows(b.next_batch()));
  EXPECT_NE(first, batch_rows(other.next_batch()));
  EXPECT_THROW(a.load_state_dict(other.state_dict()), Error);  // saved with another seed
}

TEST_F(DataLoaderTest, ValidationIsHeldOutAndCoveredOnce) {
  DataLoader loader(config());
  ASSERT_GT(loader.num_validation_documents(), 10u);
  EXPECT_EQ(loader.num_train_documents() + loader.num_validation_documents(), 300u);
  // Tokens name their document (1000 * d + ...): collect which documents each side sees.
  auto document_of = [](int64_t token) { return token / 1000; };
  std::set<int64_t> training;
  for (int step = 0; step < 200; ++step) {
    for (int64_t token : loader.next_batch().input_ids.to_ints()) {
      if (token != 0 && token != 999) training.insert(document_of(token));
    }
  }
  EXPECT_EQ(training.size(), loader.num_train_documents());
  std::set<int64_t> held_out(loader.validation_documents().begin(), loader.validation_documents().end());
  for (int64_t d : training) EXPECT_EQ(held_out.count(d), 0u) << d;

  // Two ranks' validation passes: same number of batches, every held-out token exactly once.
  std::multiset<int64_t> seen;
  int64_t batches[2] = {0, 0};
  for (int r = 0; r < 2; ++r) {
    DataLoader rank(config(3, r, 2));
    ValidationIterator it = rank.validation();
    Batch batch;
    while (it.next(batch)) {
      ++batches[r];
      for (int64_t id : batch.input_ids.to_ints()) {
        if (id != 0 && id != 999) seen.insert(id);  // padding is EOS (999)
      }
    }
  }
  EXPECT_EQ(batches[0], batches[1]);
  std::multiset<int64_t> expected;
  const auto docs = testing::numbered_documents(300, 90, 2);
  for (uint64_t d : loader.validation_documents()) expected.insert(docs[d].begin(), docs[d].end());
  EXPECT_EQ(seen, expected);
}

TEST_F(DataLoaderTest, RawJsonlInputWithATokenizer) {
  testing::TempDir raw;
  std::string jsonl;
  for (int i = 0; i < 40; ++i) jsonl += "{\"text\": \"Document number " + std::to_string(i) + " says hello.\"}\n";
  testing::write_bytes(raw / "corpus.jsonl", jsonl);
  DataLoaderConfig c;
  c.paths = {(raw / "corpus.jsonl").string()};
  c.tokenizer = "cl100k_base";
  c.add_bos = false;  // cl100k_base has no BOS
  c.seq_len = 16;
  c.local_batch = 2;
  DataLoader loader(c);
  EXPECT_EQ(loader.num_train_documents(), 40u);
  const Batch batch = loader.next_batch();
  EXPECT_EQ(batch.input_ids.shape(), (Shape{2, 16}));
  // add_bos with a tokenizer that has none is a clear error.
  c.add_bos = true;
  EXPECT_THROW(DataLoader{c}, Error);
}

TEST_F(DataLoaderTest, BadConfigurations) {
  DataLoaderConfig c = config();
  c.dp_rank = 3;
  c.dp_world = 2;
  EXPECT_THROW(DataLoader{c}, Error);
  c = config();
  c.paths = {(dir_ / "missing").string()};
  EXPECT_THROW(DataLoader{c}, Error);  // a raw input without a tokenizer
  c.tokenizer = "cl100k_base";
  try {
    DataLoader loader(c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
}

}  // namespace data_loader_test
}  // namespace titan::data
