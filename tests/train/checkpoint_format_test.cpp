// The checkpoint format's parts on their own: CRC-32C against its published
// check value and a bit-by-bit reference, the metadata parser's refusals, and
// chunk files read back at boxes that cut across chunks and checksum blocks,
// and boxes of safetensors tensors read by ranged reads.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "titan/checkpoint/checkpoint_metadata.h"
#include "titan/checkpoint/chunk_file.h"
#include "titan/checkpoint/crc32c.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/error.h"

namespace titan {
namespace checkpoint_format_test {

namespace fs = std::filesystem;
using checkpoint::crc32c;

// The definition: one bit at a time, reflected polynomial 0x82F63B78.
uint32_t crc32c_bitwise(const std::vector<uint8_t>& bytes) {
  uint32_t crc = 0xffffffffu;
  for (uint8_t byte : bytes) {
    crc ^= byte;
    for (int i = 0; i < 8; ++i) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
  }
  return ~crc;
}

TEST(Crc32c, MatchesCheckValueAndBitwiseReference) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC catalogue's check value
  std::mt19937 random(7);
  for (size_t size : {0u, 1u, 7u, 8u, 9u, 63u, 1000u, 4099u}) {
    std::vector<uint8_t> bytes(size);
    for (auto& b : bytes) b = static_cast<uint8_t>(random());
    const uint32_t expected = crc32c_bitwise(bytes);
    EXPECT_EQ(crc32c(bytes.data(), size), expected) << size;
    EXPECT_EQ(checkpoint::crc32c_portable(bytes.data(), size), expected) << size;
    const size_t half = size / 2;
    EXPECT_EQ(crc32c(bytes.data() + half, size - half, crc32c(bytes.data(), half)), expected) << size;
  }
}

std::string error_of(const std::string& text) {
  try {
    checkpoint::parse_checkpoint_metadata(text, "m.json");
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

std::string metadata_with(const std::string& chunks) {
  return R"({"format":"titan-checkpoint","version":1,"step":1,"titan_version":"x","checksum":"crc32c",
             "checksum_block_bytes":4096,"state":{},"tensors":{"w":{"dtype":"F32","shape":[4,2],"chunks":[)" +
         chunks + "]}}}";
}

TEST(CheckpointMetadata, RefusesBadChunksNamingTheTensor) {
  const std::string a = R"({"file":"r0","byte_offset":0,"offsets":[0,0],"shape":[2,2],"crc32c":[1]})";
  const std::string b = R"({"file":"r1","byte_offset":0,"offsets":[2,0],"shape":[2,2],"crc32c":[1]})";
  EXPECT_EQ(error_of(metadata_with(a + "," + b)), "");
  EXPECT_NE(error_of(metadata_with(a)).find("tensor 'w': chunks hold 4 of its 8 elements"), std::string::npos);
  EXPECT_NE(error_of(metadata_with(a + "," + a)).find("overlaps an earlier chunk"), std::string::npos);
  const std::string outside = R"({"file":"r1","byte_offset":0,"offsets":[3,0],"shape":[2,2],"crc32c":[1]})";
  EXPECT_NE(error_of(metadata_with(a + "," + outside)).find("leaves the tensor's shape in dim 0"), std::string::npos);
  const std::string escape = R"({"file":"../x","byte_offset":0,"offsets":[2,0],"shape":[2,2],"crc32c":[1]})";
  EXPECT_NE(error_of(metadata_with(a + "," + escape)).find("plain file name"), std::string::npos);
  EXPECT_NE(error_of("{").find("m.json: not valid JSON"), std::string::npos);
}

// A [6, 5, 300] tensor saved as two boxes split along dim 1 (as tensor
// parallelism splits), read back at boxes that straddle both, in files with
// 4 KiB checksum blocks so reads start and end inside blocks.
TEST(ChunkFile, ReadsAnyBoxAcrossChunksAndBlocks) {
  const std::vector<int64_t> shape{6, 5, 300};
  std::vector<float> values(6 * 5 * 300);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  auto box = [&](std::vector<int64_t> at, std::vector<int64_t> size) {
    std::vector<float> out;
    for (int64_t i = at[0]; i < at[0] + size[0]; ++i)
      for (int64_t j = at[1]; j < at[1] + size[1]; ++j)
        for (int64_t k = at[2]; k < at[2] + size[2]; ++k)
          out.push_back(values[static_cast<size_t>((i * 5 + j) * 300 + k)]);
    return Tensor::from_vector(out, size);
  };
  const fs::path folder = fs::path(::testing::TempDir()) / "chunk_file_test";
  fs::remove_all(folder);
  fs::create_directories(folder);
  checkpoint::CheckpointMetadata metadata;
  metadata.checksum_block_bytes = 4096;
  metadata.tensors["t"].shape = shape;
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> parts{{{0, 0, 0}, {6, 2, 300}},
                                                                                 {{0, 2, 0}, {6, 3, 300}}};
  for (size_t r = 0; r < parts.size(); ++r) {
    const std::string path = (folder / fmt::format("rank-{}.safetensors", r)).string();
    const auto written = checkpoint::write_chunk_file(
        path, {{"t", box(parts[r].first, parts[r].second), shape, parts[r].first}}, metadata.checksum_block_bytes);
    ASSERT_EQ(written.size(), 1u);
    metadata.tensors["t"].chunks.push_back(written[0].second);
  }
  checkpoint::ChunkReader reader(folder.string(), metadata);
  for (const auto& [at, size] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{0, 0, 0}, {6, 5, 300}}, {{1, 1, 7}, {3, 3, 250}}, {{5, 0, 0}, {1, 5, 300}}, {{2, 2, 0}, {2, 3, 300}}}) {
    Tensor target = Tensor::zeros(size);
    reader.read_box("t", target, shape, at);
    EXPECT_EQ(target.to_floats(), box(at, size).to_floats()) << at[0] << "," << at[1] << "," << at[2];
  }
  Tensor wrong = Tensor::zeros({6, 5, 300});
  EXPECT_THROW(reader.read_box("t", wrong, {6, 5, 301}, {0, 0, 0}), Error);
}

// Every box of a 3-D tensor (random ones, plus whole rows, one element, the
// whole tensor and empty ones), in f32 and bf16, is the tensor narrowed to it,
// and reading it reads exactly its bytes; boxes outside the tensor are refused.
TEST(SafetensorsReader, ReadBoxIsTheNarrowedTensorAndReadsOnlyItsBytes) {
  const Shape shape{5, 6, 7};
  std::vector<float> values(5 * 6 * 7);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) - 100.0f;
  const Tensor whole = Tensor::from_vector(values, shape);
  const fs::path path = fs::path(::testing::TempDir()) / "read_box_test.safetensors";
  checkpoint::write_safetensors(path.string(),
                                {{"f32", whole}, {"bf16", whole.to(DType::bf16)}, {"flat", whole.view({210})}});
  const checkpoint::SafetensorsReader reader(path.string());
  std::vector<std::pair<Shape, Shape>> boxes{{{0, 0, 0}, {5, 6, 7}}, {{2, 0, 0}, {2, 6, 7}}, {{1, 2, 3}, {1, 1, 1}},
                                             {{0, 3, 0}, {5, 2, 7}}, {{4, 5, 6}, {0, 1, 1}}, {{0, 0, 5}, {5, 6, 2}}};
  std::mt19937 random(7);
  for (int i = 0; i < 40; ++i) {
    Shape at(3), size(3);
    for (size_t d = 0; d < 3; ++d) {
      at[d] = std::uniform_int_distribution<int64_t>(0, shape[d] - 1)(random);
      size[d] = std::uniform_int_distribution<int64_t>(0, shape[d] - at[d])(random);
    }
    boxes.emplace_back(at, size);
  }
  for (const auto& [at, size] : boxes) {
    Tensor expected = whole;
    for (int64_t d = 0; d < 3; ++d)
      expected = expected.narrow(d, at[static_cast<size_t>(d)], size[static_cast<size_t>(d)]);
    for (const char* name : {"f32", "bf16"}) {
      const uint64_t before = checkpoint::safetensors_bytes_read();
      const Tensor box = reader.read_box(name, at, size);
      const Tensor want = expected.to(reader.entry(name).dtype);
      EXPECT_EQ(checkpoint::safetensors_bytes_read() - before, want.nbytes()) << name << " " << shape_str(at);
      EXPECT_EQ(box.shape(), size);
      EXPECT_EQ(box.to(DType::f32).to_floats(), want.to(DType::f32).to_floats())
          << name << " box " << shape_str(size) << " at " << shape_str(at);
    }
  }
  EXPECT_EQ(reader.read_box("flat", {17}, {50}).to_floats(), whole.view({210}).narrow(0, 17, 50).to_floats());
  EXPECT_THROW(reader.read_box("f32", {0, 0, 1}, {5, 6, 7}), Error);
  EXPECT_THROW(reader.read_box("f32", {0, 0}, {5, 6}), Error);
  EXPECT_THROW(reader.read_box("f32", {-1, 0, 0}, {1, 1, 1}), Error);
  EXPECT_THROW(reader.read_box("missing", {0}, {1}), Error);
}

}  // namespace checkpoint_format_test
}  // namespace titan
