// Element types a Tensor can hold, their sizes and names, and the scalar
// conversions between f32 and the narrow floating formats (bf16, f16, fp8).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace titan {

enum class DType : uint8_t { f32, bf16, f16, f8e4m3, f8e5m2, i32, i64, u8 };
inline constexpr int kNumDTypes = 8;

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
// Parses "f32", "float32", "bf16", "bfloat16", ...; throws titan::Error naming the text.
DType parse_dtype(std::string_view text);
bool is_floating(DType dtype);

// bf16 storage: the high half of an IEEE f32. Conversion from f32 rounds to
// nearest-even (what PyTorch and the hardware do), keeping NaN a quiet NaN.
struct bf16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16 value) {
  uint32_t word = static_cast<uint32_t>(value.bits) << 16;
  float result;
  std::memcpy(&result, &word, sizeof(result));
  return result;
}

inline bf16 float_to_bf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if ((word & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((word >> 16) | 0x0040u)};
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit.
  word += 0x7fffu + ((word >> 16) & 1u);
  return bf16{static_cast<uint16_t>(word >> 16)};
}

// f16 (IEEE binary16) and the two fp8 formats (OCP: e4m3 "fn" without
// infinities, max 448, saturating; e5m2 with IEEE infinities) are storage
// formats here: convert through f32. Rounding is nearest-even.
uint16_t float_to_f16(float value);
float f16_to_float(uint16_t bits);
uint8_t float_to_f8e4m3(float value);
float f8e4m3_to_float(uint8_t bits);
uint8_t float_to_f8e5m2(float value);
float f8e5m2_to_float(uint8_t bits);

// Element `index` of a buffer of `dtype`, widened to double (exact for every
// dtype here but i64 beyond 2^53). For setup, tests and printing; kernels use
// typed loops.
double load_element(const void* base, DType dtype, int64_t index);
// Stores `value` as element `index`: narrow floats round to nearest-even
// through f32, integers truncate.
void store_element(void* base, DType dtype, int64_t index, double value);

}  // namespace titan
