// The block-scaled MXFP8 GEMM's pieces (ops/float8.h; TorchTitan's
// "mxfp8_cublas" on sm_100):
//  - mx_scale_tiles against cuBLAS's "1D block scaling factors layout",
//    written here as the offset of each (row, column) from its definition;
//  - float8_mx_codes: each code, decoded (float8_decode, itself checked
//    against the OCP tables in float8_test.cpp) and multiplied by its
//    block's 2^(e - 127), is the MX value it came from, bit for bit;
//  - the op's refusals on the CPU;
//  - on a GPU, the codes and tiles against the CPU's, and on sm_100 the
//    block-scaled GEMM against the bf16 GEMM of the MX values (skipped
//    elsewhere, counted).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "support/float8_linear_twins.h"
#include "titan/ops/float8.h"

namespace titan {
namespace float8_mx_gemm_test {

using ops::Float8Cast;
using ops::Float8Format;
using ops::Float8Scaling;
using ops::MxScaleRounding;

Tensor random_exponents(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(1 + rng() % 254);  // never 0, so padding stands out
  return Tensor::from_vector(bytes, {rows, cols});
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor cpu = t.to(Device::cpu()).contiguous();
  const auto* data = static_cast<const uint8_t*>(cpu.data_ptr());
  return {data, data + cpu.numel()};
}

// cuBLAS's layout, from its definition: 128 x 4 tiles, row of tiles after
// row of tiles, and inside a tile row r = 32 q + p, column c at 16 p + 4 q + c.
std::vector<uint8_t> tiled_by_definition(const std::vector<uint8_t>& scales, int64_t rows, int64_t cols) {
  const int64_t padded_rows = (rows + 127) / 128 * 128, padded_cols = (cols + 3) / 4 * 4;
  std::vector<uint8_t> out(static_cast<size_t>(padded_rows * padded_cols), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t tile = (r / 128) * (padded_cols / 4) + c / 4;
      const int64_t offset = tile * 512 + (r % 32) * 16 + (r % 128) / 32 * 4 + c % 4;
      out[static_cast<size_t>(offset)] = scales[static_cast<size_t>(r * cols + c)];
    }
  }
  return out;
}

TEST(MxScaleTiles, PlacesEachScaleWhereCublasReadsIt) {
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {128, 4}, {130, 5}, {257, 9}, {64, 12}, {300, 2}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    const Tensor scales = random_exponents(rows, cols, static_cast<uint32_t>(rows * 31 + cols));
    EXPECT_EQ(bytes_of(ops::mx_scale_tiles(scales)), tiled_by_definition(bytes_of(scales), rows, cols));
  }
  // A transposed view is read through its strides.
  const Tensor scales = random_exponents(9, 140, 5);
  EXPECT_EQ(bytes_of(ops::mx_scale_tiles(scales.transpose(0, 1))),
            tiled_by_definition(bytes_of(scales.transpose(0, 1)), 140, 9));
}

// x [R, C] with every row's magnitude in its own octave, 2^-12 .. 2^12, so blocks get many exponents.
Tensor spread_input(int64_t rows, int64_t cols, DType dtype, uint64_t seed) {
  std::vector<float> v = testing::random_cpu({rows, cols}, DType::f32, seed, -1.0, 1.0).to_floats();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      v[static_cast<size_t>(r * cols + c)] *= std::ldexp(1.0f, (r * 5 + c / 32) % 25 - 12);
  }
  v[3] = std::nanf("");  // the first row's first block holds a NaN: exponent 255
  for (int64_t c = 32; c < 64; ++c) v[static_cast<size_t>(cols + c)] = 0.0f;  // an all-zero block
  return Tensor::from_floats(v, {rows, cols}).to(dtype);
}

// Each code decoded, times 2^(e - 127), against the MX value (NaN blocks NaN).
void expect_codes_give_values(const Tensor& codes, const Tensor& values, const Tensor& exponents) {
  Tensor decoded = Tensor::empty(codes.shape(), DType::f32);
  ops::float8_decode(decoded, codes);
  const std::vector<float> code_values = decoded.to_floats(), expected = values.to_floats();
  const std::vector<uint8_t> e = bytes_of(exponents);
  const int64_t cols = values.size(1);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < values.numel(); ++i) {
    const uint8_t exponent = e[static_cast<size_t>(i / cols * (cols / 32) + i % cols / 32)];
    const float x = expected[static_cast<size_t>(i)];
    const float got = std::ldexp(code_values[static_cast<size_t>(i)], static_cast<int>(exponent) - 127);
    if (exponent == 255 ? !std::isnan(got) : got != x) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Float8MxCodes, EachCodeTimesItsBlockScaleIsTheMxValue) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = spread_input(40, 96, dtype, 7);
    for (const Float8Format format : {Float8Format::e4m3, Float8Format::e5m2}) {
      for (const MxScaleRounding rounding : {MxScaleRounding::floor, MxScaleRounding::rceil}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + ops::float8_format_name(format) +
                     (rounding == MxScaleRounding::rceil ? " rceil" : " floor"));
        const Float8Cast cast{Float8Scaling::mx_block, format, true, rounding};
        // Blocks along rows, and blocks down columns made K-major, as the Linear hands them over.
        const ops::Float8Operand rows = ops::float8_cast(x, cast, 1);
        expect_codes_give_values(ops::float8_mx_codes(rows.values, rows.scale, format), rows.values, rows.scale);
        const ops::Float8Operand cols = ops::float8_cast(x.transpose(0, 1).contiguous(), cast, 0);
        const Tensor values = cols.values.transpose(0, 1).contiguous(),
                     exponents = cols.scale.transpose(0, 1).contiguous();
        expect_codes_give_values(ops::float8_mx_codes(values, exponents, format), values, exponents);
      }
    }
  }
}

TEST(MxTensorCoreMm, RefusesOnTheCpuAndOperandsItCannotTake) {
  const Tensor a = Tensor::zeros({16, 64}, DType::f8e4m3), bt = Tensor::zeros({8, 64}, DType::f8e4m3);
  const Tensor a_scales = Tensor::zeros({16, 2}, DType::u8), b_scales = Tensor::zeros({8, 2}, DType::u8);
  testing::expect_error([&] { ops::mx_tensor_core_mm(a, a_scales, bt, b_scales, DType::f32); },
                        {"compute capability 10.0"});
  testing::expect_error(
      [&] {
        ops::mx_tensor_core_mm(a, Tensor::zeros({16, 4}, DType::u8), bt, b_scales, DType::f32);
      },
      {"a_scales [16, 4] is not one exponent per 32 codes"});
  testing::expect_error(
      [&] { ops::mx_tensor_core_mm(a.to(DType::f8e5m2), a_scales, bt.to(DType::f8e5m2), b_scales, DType::f32); },
      {"two e5m2 operands"});
  testing::expect_error(
      [&] {
        ops::float8_mx_codes(Tensor::zeros({4, 64}, DType::bf16), Tensor::zeros({4, 3}, DType::u8), Float8Format::e4m3);
      },
      {"not one per 32 values"});
  EXPECT_FALSE(ops::mx_tensor_cores(Device::cpu()));
}

// On any GPU: the codes and the tiles are the CPU's, bit for bit.
class CudaFloat8Mx : public ::testing::TestWithParam<DType> {};

TEST_P(CudaFloat8Mx, CodesAndTilesMatchTheCpu) {
  TITAN_REQUIRE_CUDA();
  const Tensor x = spread_input(40, 96, GetParam(), 11);
  const ops::Float8Operand cast = ops::float8_cast(x, Float8Cast{Float8Scaling::mx_block, Float8Format::e4m3, true}, 1);
  const Tensor codes = ops::float8_mx_codes(cast.values, cast.scale, Float8Format::e4m3);
  const Tensor gpu_codes =
      ops::float8_mx_codes(testing::on_cuda(cast.values), testing::on_cuda(cast.scale), Float8Format::e4m3);
  EXPECT_EQ(bytes_of(gpu_codes), bytes_of(codes));
  const Tensor scales = random_exponents(257, 9, 3);
  EXPECT_EQ(bytes_of(ops::mx_scale_tiles(testing::on_cuda(scales))), bytes_of(ops::mx_scale_tiles(scales)));
}

// On sm_100: the block-scaled GEMM against the bf16 GEMM of the MX values
// (both accumulate the same exact products in f32, in different orders:
// 1e-5 relative), then the MX Linear with tensor cores on against off.
TEST_P(CudaFloat8Mx, BlockScaledGemmMatchesTheEmulation) {
  TITAN_REQUIRE_CUDA();
  if (!ops::mx_tensor_cores(Device::cuda())) GTEST_SKIP() << "this GPU has no block-scaled fp8 tensor cores (sm_100+)";
  const DType dtype = GetParam();
  const Tensor x = testing::on_cuda(testing::random_cpu({96, 128}, dtype, 51, -3.0, 3.0));
  const Tensor w = testing::on_cuda(testing::random_cpu({160, 128}, dtype, 52, -0.1, 0.1));
  const Float8Cast cast{Float8Scaling::mx_block, Float8Format::e4m3, true};
  const ops::Float8Operand a = ops::float8_cast(x, cast, 1), b = ops::float8_cast(w, cast, 1);
  const Tensor emulated = ops::float8_scaled_mm(a.values, Tensor(), b.values.transpose(0, 1), Tensor(), DType::f32);
  const Tensor blocks =
      ops::mx_tensor_core_mm(ops::float8_mx_codes(a.values, a.scale, Float8Format::e4m3), a.scale,
                             ops::float8_mx_codes(b.values, b.scale, Float8Format::e4m3), b.scale, DType::f32);
  const Tensor e = testing::on_cpu(emulated);
  EXPECT_TRUE(testing::all_close(testing::on_cpu(blocks), e, 1e-5 * testing::max_abs(e), 1e-5));
  testing::expect_tensor_cores_match_emulation("mxfp8_cublas", x, w,
                                               testing::on_cuda(testing::random_cpu({96, 160}, dtype, 53)),
                                               dtype == DType::f32 ? 1e-5 : 1.0 / 128);
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaFloat8Mx, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace float8_mx_gemm_test
}  // namespace titan
