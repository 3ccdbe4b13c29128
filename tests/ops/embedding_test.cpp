// The embedding lookup and its backward (accumulated in f32) against the
// float64 PyTorch reference; ids outside the table are errors.
//
// CUDA embedding lookup and backward against the CPU backend. Both are exact
// here: the lookup copies rows, and the backward adds each id's rows in token
// order in f32 starting from zero, exactly as the CPU kernel does, so the
// comparisons demand identical values.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/ops/embedding.h"

namespace titan {
namespace embedding_test {

using testing::expect_matches_reference;
using testing::ReferenceCase;

class EmbeddingTest : public ::testing::TestWithParam<DType> {};

TEST_P(EmbeddingTest, MatchesReference) {
  const DType dtype = GetParam();
  ReferenceCase ref("embedding");
  const Tensor w = ref.get("weight", dtype), ids = ref.get("ids");
  expect_matches_reference(ops::embedding(w, ids), ref.get("y"), dtype);
  const Tensor grad = ops::embedding_backward(ref.get("grad_y", dtype), ids, w.size(0), DType::f32);
  // Accumulated in f32 whatever the input dtype: bf16 only enters through the rounded grad_y.
  expect_matches_reference(grad, ref.get("grad_weight"), DType::f32);
  EXPECT_THROW(ops::embedding(w, Tensor::full({2}, 50, DType::i64)), Error);
  EXPECT_THROW(ops::embedding(w, Tensor::full({2}, -1, DType::i64)), Error);
}

INSTANTIATE_TEST_SUITE_P(DTypes, EmbeddingTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace embedding_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace embedding_test {

// Ids in [0, vocab) with heavy repeats: every third token is id 3, the rest spread out.
Tensor repeated_ids(int64_t count, int64_t vocab, DType dtype, const Shape& shape) {
  std::vector<int64_t> values(static_cast<size_t>(count));
  for (int64_t t = 0; t < count; ++t) values[static_cast<size_t>(t)] = t % 3 == 0 ? 3 : (t * 7919) % vocab;
  const Tensor ids = Tensor::from_vector(values, shape);
  return dtype == DType::i64 ? ids : ids.to(dtype);
}

TEST(CudaEmbedding, LookupMatchesCpu) {
  TITAN_REQUIRE_CUDA();
  // Row sizes of 76, 38, 256 and 2 bytes exercise every copy width.
  const std::vector<std::pair<Shape, DType>> tables{
      {{37, 19}, DType::f32}, {{37, 19}, DType::bf16}, {{50, 64}, DType::f32}, {{9, 1}, DType::bf16}};
  for (const auto& [shape, dtype] : tables) {
    for (DType id_dtype : {DType::i32, DType::i64}) {
      SCOPED_TRACE(shape_str(shape) + " " + dtype_name(dtype) + ", ids " + dtype_name(id_dtype));
      const Tensor weight = random_cpu(shape, dtype, 3);
      const Tensor ids = repeated_ids(15, shape[0], id_dtype, {3, 5});
      const Tensor actual = ops::embedding(on_cuda(weight), on_cuda(ids));
      ASSERT_EQ(actual.shape(), (Shape{3, 5, shape[1]}));
      EXPECT_TRUE(all_close(on_cpu(actual), ops::embedding(weight, ids), 0.0, 0.0));
    }
  }
}

TEST(CudaEmbedding, BackwardMatchesCpuExactly) {
  TITAN_REQUIRE_CUDA();
  const int64_t vocab = 50, tokens = 1000;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (DType id_dtype : {DType::i32, DType::i64}) {
      for (int64_t dim : {int64_t{1}, int64_t{37}, int64_t{300}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + ", ids " + dtype_name(id_dtype) + ", dim " + std::to_string(dim));
        const Tensor grad_out = random_cpu({tokens / 8, 8, dim}, dtype, 9);
        const Tensor ids = repeated_ids(tokens, vocab, id_dtype, {tokens / 8, 8});
        const Tensor expected = ops::embedding_backward(grad_out, ids, vocab, dtype);
        const Tensor actual = ops::embedding_backward(on_cuda(grad_out), on_cuda(ids), vocab, dtype);
        EXPECT_EQ(actual.dtype(), dtype);
        EXPECT_TRUE(all_close(on_cpu(actual), expected, 0.0, 0.0));
      }
    }
  }
}

// The CPU's error, naming the first bad id and its position; no write lands outside the table.
TEST(CudaEmbedding, BadIdIsAnError) {
  TITAN_REQUIRE_CUDA();
  const Tensor weight = on_cuda(random_cpu({37, 8}, DType::f32, 4));
  const Tensor ids = on_cuda(Tensor::from_vector<int64_t>({1, 2, 3, 99, -4, 5}, {6}));
  expect_error([&] { ops::embedding(weight, ids); }, {"id 99", "position 3", "37 rows"});
  const Tensor ids32 = on_cuda(Tensor::from_vector<int32_t>({1, -4, 99}, {3}));
  expect_error([&] { ops::embedding(weight, ids32); }, {"id -4", "position 1", "37 rows"});
  const Tensor grad_out = on_cuda(random_cpu({6, 8}, DType::f32, 5));
  expect_error([&] { ops::embedding_backward(grad_out, ids, 37, DType::f32); }, {"id 99", "position 3", "37 rows"});
  // The device is still usable afterwards.
  const Tensor good = on_cuda(Tensor::from_vector<int64_t>({0, 36}, {2}));
  EXPECT_TRUE(all_close(on_cpu(ops::embedding(weight, good)), ops::embedding(on_cpu(weight), on_cpu(good)), 0, 0));
}

}  // namespace embedding_test
}  // namespace titan::testing
