// Conversions between f32 and the narrow formats, checked against values
// fixed by the format definitions (IEEE 754 binary16, bfloat16, OCP FP8).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "titan/core/dtype.h"
#include "titan/core/error.h"

namespace titan {
namespace dtype_test {

float from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f8e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_THROW(parse_dtype("float128"), Error);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808000u)).bits, 0x3F80u);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(float_to_bf16(from_bits(0x3F818000u)).bits, 0x3F82u);
  // Just above halfway rounds up.
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001u)).bits, 0x3F81u);
  EXPECT_EQ(bf16_to_float(float_to_bf16(3.140625f)), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
  // The largest finite f32 rounds to bf16 infinity (it exceeds bf16's max by more than half an ulp).
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max()))));
}

TEST(DType, F16MatchesIeeeBinary16) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3C00u);
  EXPECT_EQ(float_to_f16(-2.0f), 0xC000u);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7BFFu);               // largest finite
  EXPECT_EQ(float_to_f16(65536.0f), 0x7C00u);               // overflows to inf
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001u);  // smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000u);  // halfway to 0: ties to even (0)
  EXPECT_EQ(f16_to_float(0x3555u), 0.333251953125f);
  EXPECT_EQ(f16_to_float(0x0001u), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::nanf("")))));
  // Every finite f16 survives f16 -> f32 -> f16.
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    if ((bits & 0x7C00u) == 0x7C00u) continue;
    ASSERT_EQ(float_to_f16(f16_to_float(static_cast<uint16_t>(bits))), bits) << bits;
  }
}

TEST(DType, Fp8E4M3) {
  EXPECT_EQ(f8e4m3_to_float(0x7E), 448.0f);                // max finite: S.1111.110
  EXPECT_TRUE(std::isnan(f8e4m3_to_float(0x7F)));          // S.1111.111 is NaN (no infinities)
  EXPECT_EQ(f8e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // min normal
  EXPECT_EQ(f8e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_EQ(float_to_f8e4m3(1000.0f), 0x7E);               // saturates to max
  EXPECT_EQ(float_to_f8e4m3(-1000.0f), 0xFE);
  EXPECT_EQ(float_to_f8e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_f8e4m3(1.0625f), 0x38);  // halfway between 1 and 1.125: ties to even
  EXPECT_EQ(float_to_f8e4m3(1.1875f), 0x3A);  // halfway between 1.125 (odd) and 1.25: up
  for (uint32_t bits = 0; bits < 256; ++bits) {
    if ((bits & 0x7F) == 0x7F) continue;
    ASSERT_EQ(float_to_f8e4m3(f8e4m3_to_float(static_cast<uint8_t>(bits))), bits) << bits;
  }
}

TEST(DType, Fp8E5M2) {
  EXPECT_EQ(f8e5m2_to_float(0x7B), 57344.0f);  // max finite
  EXPECT_TRUE(std::isinf(f8e5m2_to_float(0x7C)));
  EXPECT_EQ(f8e5m2_to_float(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(float_to_f8e5m2(1e6f), 0x7C);  // IEEE-style overflow to inf
  for (uint32_t bits = 0; bits < 256; ++bits) {
    if ((bits & 0x7C) == 0x7C) continue;
    ASSERT_EQ(float_to_f8e5m2(f8e5m2_to_float(static_cast<uint8_t>(bits))), bits) << bits;
  }
}

}  // namespace dtype_test
}  // namespace titan
