// MXFP4 decoding (gpt-oss's expert weights) against the OCP Microscaling
// specification: the E2M1 code table as the specification lists it, the
// nibble order gpt-oss checkpoints use (low nibble first), E8M0 scales as
// powers of two, and the refusals (a NaN scale, overflow, a mismatched shape).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "titan/checkpoint/mxfp4.h"
#include "titan/core/error.h"

namespace titan {
namespace mxfp4_test {

// The OCP MX specification's E2M1 values, codes 0 to 15.
constexpr float kSpecE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                 -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

TEST(Mxfp4, E2M1CodesAreTheSpecificationsValues) {
  for (uint8_t code = 0; code < 16; ++code) {
    EXPECT_EQ(checkpoint::e2m1_value(code), kSpecE2M1[code]) << "code " << int(code);
    EXPECT_EQ(std::signbit(checkpoint::e2m1_value(code)), code >= 8) << "code " << int(code);
  }
}

TEST(Mxfp4, LowNibbleComesFirst) {
  std::vector<uint8_t> bytes(16, 0);
  bytes[0] = 0x72;  // value 0: code 2 (1.0); value 1: code 7 (6.0)
  const Tensor blocks = Tensor::from_vector(bytes, {1, 16});
  const Tensor scales = Tensor::from_vector(std::vector<uint8_t>{128}, {1});  // 2^1
  const Tensor out = checkpoint::dequantize_mxfp4(blocks, scales, DType::f32, "w");
  ASSERT_EQ(out.shape(), (Shape{32}));
  EXPECT_EQ(out.data<float>()[0], 2.0f);
  EXPECT_EQ(out.data<float>()[1], 12.0f);
  for (int i = 2; i < 32; ++i) EXPECT_EQ(out.data<float>()[i], 0.0f);
}

// Random codes and scales over the whole finite range (experts [2, 3] rows of 2 blocks):
// every value is the specification's code value times 2^(scale - 127), in f32 and, exactly, in bf16.
TEST(Mxfp4, RandomBlocksDecodeToCodeTimesPowerOfTwo) {
  std::mt19937 rng(7);
  const Shape scale_shape{2, 3, 2};
  std::vector<uint8_t> bytes(2 * 3 * 2 * 16), exps(2 * 3 * 2);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() & 0xFF);
  for (uint8_t& e : exps) e = static_cast<uint8_t>(rng() % 253);  // up to 2^125: 6 * 2^125 is finite
  const Tensor blocks = Tensor::from_vector(bytes, {2, 3, 2, 16});
  const Tensor scales = Tensor::from_vector(exps, scale_shape);
  const Tensor f32 = checkpoint::dequantize_mxfp4(blocks, scales, DType::f32, "experts.gate_up_proj");
  const Tensor bf = checkpoint::dequantize_mxfp4(blocks, scales, DType::bf16, "experts.gate_up_proj");
  ASSERT_EQ(f32.shape(), (Shape{2, 3, 64}));
  for (int64_t i = 0; i < f32.numel(); ++i) {
    const int64_t block = i / 32, within = i % 32;
    const uint8_t byte = bytes[block * 16 + within / 2];
    const uint8_t code = within % 2 ? byte >> 4 : byte & 0xF;
    const double expected = kSpecE2M1[code] * std::pow(2.0, static_cast<int>(exps[block]) - 127);
    ASSERT_EQ(static_cast<double>(f32.data<float>()[i]), expected) << "element " << i;
    ASSERT_EQ(static_cast<double>(bf16_to_float(bf.data<bf16>()[i])), expected) << "element " << i;
  }
}

TEST(Mxfp4, RefusesNanScalesOverflowAndMismatchedShapes) {
  const Tensor blocks = Tensor::from_vector(std::vector<uint8_t>(16, 0x77), {1, 16});  // 6.0 everywhere
  auto decode = [&](uint8_t scale) {
    return checkpoint::dequantize_mxfp4(blocks, Tensor::from_vector(std::vector<uint8_t>{scale}, {1}), DType::f32,
                                        "model.layers.0.mlp.experts.down_proj");
  };
  EXPECT_NO_THROW(decode(252));  // 6 * 2^125
  try {
    decode(0xFF);
    ADD_FAILURE() << "a NaN scale was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("down_proj: MXFP4 scale of block 0 is 0xFF"), std::string::npos) << e.what();
  }
  EXPECT_THROW(decode(254), Error);  // 6 * 2^127 overflows f32
  const Tensor wrong_scales = Tensor::from_vector(std::vector<uint8_t>{127, 127}, {2});
  EXPECT_THROW(checkpoint::dequantize_mxfp4(blocks, wrong_scales, DType::f32, "w"), Error);
  EXPECT_THROW(
      checkpoint::dequantize_mxfp4(blocks, Tensor::from_vector(std::vector<uint8_t>{127}, {1}), DType::f16, "w"),
      Error);
}

}  // namespace mxfp4_test
}  // namespace titan
