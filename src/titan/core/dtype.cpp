#include "titan/core/dtype.h"

#include <cmath>
#include <limits>

#include "titan/core/error.h"

namespace titan {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::f8e4m3:
      return 1;
    case DType::f8e5m2:
      return 1;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  fail("dtype_size: invalid dtype {}", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::f8e4m3:
      return "f8e4m3";
    case DType::f8e5m2:
      return "f8e5m2";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "invalid";
}

DType parse_dtype(std::string_view text) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias aliases[] = {
      {"f32", DType::f32},       {"float32", DType::f32},
      {"fp32", DType::f32},      {"bf16", DType::bf16},
      {"bfloat16", DType::bf16}, {"f16", DType::f16},
      {"float16", DType::f16},   {"fp16", DType::f16},
      {"f8e4m3", DType::f8e4m3}, {"float8_e4m3fn", DType::f8e4m3},
      {"f8e5m2", DType::f8e5m2}, {"float8_e5m2", DType::f8e5m2},
      {"i32", DType::i32},       {"int32", DType::i32},
      {"i64", DType::i64},       {"int64", DType::i64},
      {"u8", DType::u8},         {"uint8", DType::u8},
  };
  for (const Alias& alias : aliases) {
    if (alias.name == text) return alias.dtype;
  }
  fail("unknown dtype '{}' (expected one of f32, bf16, f16, f8e4m3, f8e5m2, i32, i64, u8)", text);
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f8e4m3 ||
         dtype == DType::f8e5m2;
}

namespace {

// A small IEEE-like binary format: 1 sign bit, `exponent_bits`, `mantissa_bits`.
struct MiniFloat {
  int exponent_bits;
  int mantissa_bits;
  bool has_infinity;  // e4m3 "fn" has none: its all-ones exponent is still finite
  bool saturate;      // overflow clamps to the largest finite value instead of inf
  uint32_t nan_code;  // the positive quiet NaN pattern
  float max_finite;

  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
};

constexpr MiniFloat kF16{5, 10, true, false, 0x7e00u, 65504.0f};
constexpr MiniFloat kE4M3{4, 3, false, true, 0x7fu, 448.0f};
constexpr MiniFloat kE5M2{5, 2, true, false, 0x7eu, 57344.0f};

uint32_t encode(const MiniFloat& format, float value) {
  const uint32_t sign = std::signbit(value) ? 1u << (format.exponent_bits + format.mantissa_bits) : 0u;
  if (std::isnan(value)) return format.nan_code | sign;
  float magnitude = std::fabs(value);
  const int min_exponent = 1 - format.bias();
  int exponent;
  std::frexp(magnitude, &exponent);  // magnitude = m * 2^exponent, m in [0.5, 1)
  exponent -= 1;                     // now magnitude = m' * 2^exponent, m' in [1, 2)
  if (magnitude == 0.0f || exponent < min_exponent) exponent = min_exponent;
  // Scale so one unit in the last place of the target is 1, round to nearest-even.
  const float quantum = std::ldexp(1.0f, exponent - format.mantissa_bits);
  float rounded = std::nearbyint(magnitude / quantum) * quantum;
  if (std::isinf(magnitude) || rounded > format.max_finite) {
    const uint32_t infinity = ((1u << format.exponent_bits) - 1) << format.mantissa_bits;
    if (format.has_infinity && (std::isinf(magnitude) || !format.saturate)) return sign | infinity;
    rounded = format.max_finite;
  }
  if (rounded == 0.0f) return sign;
  int rounded_exponent;
  const float fraction = std::frexp(rounded, &rounded_exponent);  // in [0.5, 1)
  rounded_exponent -= 1;
  if (rounded_exponent < min_exponent) {  // subnormal: biased exponent 0
    const auto mantissa = static_cast<uint32_t>(std::ldexp(rounded, format.mantissa_bits - min_exponent));
    return sign | mantissa;
  }
  const auto biased = static_cast<uint32_t>(rounded_exponent + format.bias());
  const auto mantissa = static_cast<uint32_t>(std::ldexp(fraction * 2.0f - 1.0f, format.mantissa_bits));
  return sign | (biased << format.mantissa_bits) | mantissa;
}

float decode(const MiniFloat& format, uint32_t bits) {
  const uint32_t mantissa_mask = (1u << format.mantissa_bits) - 1;
  const uint32_t exponent_mask = (1u << format.exponent_bits) - 1;
  const bool negative = (bits >> (format.exponent_bits + format.mantissa_bits)) & 1u;
  const uint32_t biased = (bits >> format.mantissa_bits) & exponent_mask;
  const uint32_t mantissa = bits & mantissa_mask;
  float magnitude;
  if (biased == exponent_mask && format.has_infinity) {
    magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (biased == exponent_mask && mantissa == mantissa_mask && !format.has_infinity) {
    magnitude = std::numeric_limits<float>::quiet_NaN();  // e4m3fn: S.1111.111 is NaN
  } else if (biased == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), 1 - format.bias() - format.mantissa_bits);
  } else {
    magnitude = std::ldexp(1.0f + std::ldexp(static_cast<float>(mantissa), -format.mantissa_bits),
                           static_cast<int>(biased) - format.bias());
  }
  return negative ? -magnitude : magnitude;
}

}  // namespace

uint16_t float_to_f16(float value) { return static_cast<uint16_t>(encode(kF16, value)); }
float f16_to_float(uint16_t bits) { return decode(kF16, bits); }
uint8_t float_to_f8e4m3(float value) { return static_cast<uint8_t>(encode(kE4M3, value)); }
float f8e4m3_to_float(uint8_t bits) { return decode(kE4M3, bits); }
uint8_t float_to_f8e5m2(float value) { return static_cast<uint8_t>(encode(kE5M2, value)); }
float f8e5m2_to_float(uint8_t bits) { return decode(kE5M2, bits); }

double load_element(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(base)[index];
    case DType::bf16:
      return bf16_to_float(static_cast<const bf16*>(base)[index]);
    case DType::f16:
      return f16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::f8e4m3:
      return f8e4m3_to_float(static_cast<const uint8_t*>(base)[index]);
    case DType::f8e5m2:
      return f8e5m2_to_float(static_cast<const uint8_t*>(base)[index]);
    case DType::i32:
      return static_cast<const int32_t*>(base)[index];
    case DType::i64:
      return static_cast<double>(static_cast<const int64_t*>(base)[index]);
    case DType::u8:
      return static_cast<const uint8_t*>(base)[index];
  }
  return 0.0;
}

void store_element(void* base, DType dtype, int64_t index, double value) {
  const auto narrow = static_cast<float>(value);
  switch (dtype) {
    case DType::f32:
      static_cast<float*>(base)[index] = narrow;
      break;
    case DType::bf16:
      static_cast<bf16*>(base)[index] = float_to_bf16(narrow);
      break;
    case DType::f16:
      static_cast<uint16_t*>(base)[index] = float_to_f16(narrow);
      break;
    case DType::f8e4m3:
      static_cast<uint8_t*>(base)[index] = float_to_f8e4m3(narrow);
      break;
    case DType::f8e5m2:
      static_cast<uint8_t*>(base)[index] = float_to_f8e5m2(narrow);
      break;
    case DType::i32:
      static_cast<int32_t*>(base)[index] = static_cast<int32_t>(value);
      break;
    case DType::i64:
      static_cast<int64_t*>(base)[index] = static_cast<int64_t>(value);
      break;
    case DType::u8:
      static_cast<uint8_t*>(base)[index] = static_cast<uint8_t>(value);
      break;
  }
}

}  // namespace titan
