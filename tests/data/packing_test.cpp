// Packing documents into rows: inputs, labels, positions and document ids on
// hand-checked cases, with document masking on and off.
#include <gtest/gtest.h>

#include "data/fixtures.h"
#include "data/peer_support.h"
#include "titan/data/packed_stream.h"

namespace titan::data {
namespace packing_test {

constexpr uint32_t kBos = 1, kEos = 2;

using testing::next_row;
using testing::Row;

std::shared_ptr<const TokenCorpus> corpus(const testing::TempDir& dir, const std::vector<std::vector<uint32_t>>& docs) {
  testing::write_token_dataset(dir.path(), docs, 100, kBos, kEos);
  return std::make_shared<const TokenCorpus>(std::vector<std::string>{dir.path().string()}, TokenCorpus::Options{});
}

PackedStream::Options options(bool masking, bool repeat = true) {
  PackedStream::Options o;
  o.bos = kBos;
  o.eos = kEos;
  o.shuffle = false;
  o.repeat = repeat;
  o.document_masking = masking;
  o.pad_id = kEos;
  return o;
}

// Documents [10 11 12] [20] [30 31 32 33] pack as
//   stream: B 10 11 12 E B 20 E B 30 31 32 33 E | B 10 ...
TEST(Packing, RowsWithDocumentMasking) {
  testing::TempDir dir;
  PackedStream stream(corpus(dir, {{10, 11, 12}, {20}, {30, 31, 32, 33}}), {0, 1, 2}, options(true));
  const Row a = next_row(stream, 6);
  EXPECT_EQ(a.inputs, (std::vector<int64_t>{1, 10, 11, 12, 2, 1}));
  // The EOS ending document 0 is not asked to predict the next document's BOS.
  EXPECT_EQ(a.labels, (std::vector<int64_t>{10, 11, 12, 2, -100, 20}));
  EXPECT_EQ(a.positions, (std::vector<int64_t>{0, 1, 2, 3, 4, 0}));
  EXPECT_EQ(a.documents, (std::vector<int64_t>{0, 0, 0, 0, 0, 1}));
  const Row b = next_row(stream, 6);
  EXPECT_EQ(b.inputs, (std::vector<int64_t>{20, 2, 1, 30, 31, 32}));
  EXPECT_EQ(b.labels, (std::vector<int64_t>{2, -100, 30, 31, 32, 33}));
  // Document 1 began in the previous row: its positions restart with the row.
  EXPECT_EQ(b.positions, (std::vector<int64_t>{0, 1, 0, 1, 2, 3}));
  EXPECT_EQ(b.documents, (std::vector<int64_t>{0, 0, 1, 1, 1, 1}));
  const Row c = next_row(stream, 6);
  // Epoch 2 starts right after document 2's EOS.
  EXPECT_EQ(c.inputs, (std::vector<int64_t>{33, 2, 1, 10, 11, 12}));
  EXPECT_EQ(c.labels, (std::vector<int64_t>{2, -100, 10, 11, 12, 2}));
  EXPECT_EQ(c.positions, (std::vector<int64_t>{0, 1, 0, 1, 2, 3}));
  EXPECT_EQ(c.documents, (std::vector<int64_t>{0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(stream.cursor().epoch, 1u);
}

TEST(Packing, RowsWithoutDocumentMasking) {
  testing::TempDir dir;
  PackedStream stream(corpus(dir, {{10, 11, 12}, {20}, {30, 31, 32, 33}}), {0, 1, 2}, options(false));
  const Row a = next_row(stream, 6);
  // Without masking the row is one sequence: EOS predicts the next BOS.
  EXPECT_EQ(a.labels, (std::vector<int64_t>{10, 11, 12, 2, 1, 20}));
  EXPECT_EQ(a.documents, (std::vector<int64_t>{0, 0, 0, 0, 0, 1}));
  const Row b = next_row(stream, 6);
  EXPECT_EQ(b.labels, (std::vector<int64_t>{2, 1, 30, 31, 32, 33}));
  const Row c = next_row(stream, 6);
  EXPECT_EQ(c.labels, (std::vector<int64_t>{2, 1, 10, 11, 12, 2}));  // across the epoch boundary too
}

TEST(Packing, InvariantsOnManyDocuments) {
  testing::TempDir dir;
  const auto docs = testing::numbered_documents(200, 37, 5);
  testing::write_token_dataset(dir.path(), docs, 1000 * 200 + 1000, 0, 999, 500);
  auto data =
      std::make_shared<const TokenCorpus>(std::vector<std::string>{dir.path().string()}, TokenCorpus::Options{});
  std::vector<uint64_t> all(200);
  for (uint64_t i = 0; i < 200; ++i) all[i] = i;
  for (bool masking : {false, true}) {
    PackedStream::Options o = options(masking);
    o.bos = 0;
    o.eos = 999;
    o.shuffle = true;
    o.seed = 3;
    PackedStream stream(data, all, o);
    std::vector<int64_t> previous;
    for (int r = 0; r < 300; ++r) {
      const Row row = next_row(stream, 64);
      for (int64_t i = 0; i < 64; ++i) {
        if (i == 0) {
          EXPECT_EQ(row.positions[i], 0);
          EXPECT_EQ(row.documents[i], 0);
          continue;
        }
        const bool new_document = row.inputs[i] == 0;  // BOS starts every document
        EXPECT_EQ(row.documents[i], row.documents[i - 1] + (new_document ? 1 : 0));
        EXPECT_EQ(row.positions[i], new_document ? 0 : row.positions[i - 1] + 1);
        // Labels are the next input within the row...
        if (!(masking && row.inputs[i - 1] == 999)) {
          EXPECT_EQ(row.labels[i - 1], row.inputs[i]);
        }
        // ...and, with masking, never cross a document boundary.
        if (masking && new_document) {
          EXPECT_EQ(row.labels[i - 1], -100);
        }
        // Within a document, tokens are consecutive (a token names its document).
        if (!new_document && row.inputs[i] != 999 && row.inputs[i - 1] != 0) {
          EXPECT_EQ(row.inputs[i], row.inputs[i - 1] + 1);
        }
      }
      if (!previous.empty()) {
        // The last label of a row is the first input of the next (or -100 at a masked document end).
        const int64_t last_label = previous.back();
        if (last_label != -100) {
          EXPECT_EQ(last_label, row.inputs[0]);
        }
      }
      previous = row.labels;
    }
  }
}

TEST(Packing, OnePassStreamPadsTheEnd) {
  testing::TempDir dir;
  PackedStream stream(corpus(dir, {{10, 11}, {20}}), {0, 1}, options(true, /*repeat=*/false));
  EXPECT_EQ(stream.tokens_per_epoch(), 7u);
  const Row a = next_row(stream, 5);
  EXPECT_EQ(a.real, 5);
  EXPECT_EQ(a.inputs, (std::vector<int64_t>{1, 10, 11, 2, 1}));
  const Row b = next_row(stream, 5);
  EXPECT_EQ(b.real, 2);
  EXPECT_EQ(b.inputs, (std::vector<int64_t>{20, 2, 2, 2, 2}));
  EXPECT_EQ(b.labels, (std::vector<int64_t>{2, -100, -100, -100, -100}));
  EXPECT_EQ(b.documents, (std::vector<int64_t>{0, 0, 1, 1, 1}));
  EXPECT_TRUE(stream.exhausted());
  EXPECT_EQ(next_row(stream, 5).real, 0);
}

TEST(Packing, SkipRowsEqualsReadingThem) {
  testing::TempDir dir;
  const auto docs = testing::numbered_documents(50, 20, 9);
  testing::write_token_dataset(dir.path(), docs, 60000, 0, 999);
  auto data =
      std::make_shared<const TokenCorpus>(std::vector<std::string>{dir.path().string()}, TokenCorpus::Options{});
  std::vector<uint64_t> all(50);
  for (uint64_t i = 0; i < 50; ++i) all[i] = i;
  PackedStream::Options o = options(true);
  o.bos = 0;
  o.eos = 999;
  o.shuffle = true;
  PackedStream read(data, all, o), skipped(data, all, o);
  for (int i = 0; i < 37; ++i) next_row(read, 16);
  skipped.skip_rows(37, 16);
  EXPECT_EQ(read.cursor(), skipped.cursor());
  EXPECT_EQ(next_row(read, 16).inputs, next_row(skipped, 16).inputs);
}

}  // namespace packing_test
}  // namespace titan::data
