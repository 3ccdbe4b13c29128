#include "titan/checkpoint/mxfp4.h"

#include <array>
#include <cmath>

#include "titan/core/error.h"

namespace titan::checkpoint {

float e2m1_value(uint8_t code) {
  const int sign = (code >> 3) & 1, exponent = (code >> 1) & 3, mantissa = code & 1;
  const float magnitude = exponent == 0 ? 0.5f * static_cast<float>(mantissa)
                                        : std::ldexp(1.0f + 0.5f * static_cast<float>(mantissa), exponent - 1);
  return sign ? -magnitude : magnitude;
}

namespace mxfp4_detail {

constexpr int64_t kValuesPerBlock = 32;
constexpr int64_t kBytesPerBlock = kValuesPerBlock / 2;
constexpr uint8_t kNanScale = 0xFF;

void check_layout(const Tensor& blocks, const Tensor& scales, DType dtype, const std::string& name) {
  TITAN_CHECK(dtype == DType::f32 || dtype == DType::bf16, "{}: MXFP4 weights decode to f32 or bf16, not {}", name,
              dtype_name(dtype));
  TITAN_CHECK(blocks.dtype() == DType::u8 && scales.dtype() == DType::u8,
              "{}: MXFP4 blocks and scales must be uint8 (got {} and {})", name, dtype_name(blocks.dtype()),
              dtype_name(scales.dtype()));
  const Shape& b = blocks.shape();
  const Shape& s = scales.shape();
  TITAN_CHECK(b.size() >= 2 && b.back() == kBytesPerBlock && Shape(b.begin(), b.end() - 1) == s,
              "{}: MXFP4 blocks {} must be the scales' shape {} plus a last dimension of {} bytes", name, shape_str(b),
              shape_str(s), kBytesPerBlock);
  TITAN_CHECK(blocks.device().is_cpu() && scales.device().is_cpu(), "{}: MXFP4 weights decode on the CPU", name);
}

}  // namespace mxfp4_detail

Tensor dequantize_mxfp4(const Tensor& blocks, const Tensor& scales, DType dtype, const std::string& name) {
  using namespace mxfp4_detail;
  check_layout(blocks, scales, dtype, name);
  Shape shape(scales.shape());
  shape.back() *= kValuesPerBlock;
  Tensor out = Tensor::empty(shape, dtype);
  const Tensor packed = blocks.contiguous();
  const Tensor exponents = scales.contiguous();
  const uint8_t* bytes = packed.data<uint8_t>();
  const uint8_t* scale = exponents.data<uint8_t>();
  std::array<float, 16> table{};
  for (uint8_t code = 0; code < 16; ++code) table[code] = e2m1_value(code);

  const int64_t n_blocks = exponents.numel();
  float* out_f32 = dtype == DType::f32 ? out.data<float>() : nullptr;
  bf16* out_bf16 = dtype == DType::bf16 ? out.data<bf16>() : nullptr;
  for (int64_t block = 0; block < n_blocks; ++block) {
    TITAN_CHECK(scale[block] != kNanScale, "{}: MXFP4 scale of block {} is 0xFF, E8M0's NaN", name, block);
    const int power = static_cast<int>(scale[block]) - 127;
    for (int64_t i = 0; i < kValuesPerBlock; ++i) {
      const uint8_t byte = bytes[block * kBytesPerBlock + i / 2];
      const uint8_t code = i % 2 == 0 ? byte & 0x0F : byte >> 4;
      const float value = std::ldexp(table[code], power);
      TITAN_CHECK(std::isfinite(value), "{}: MXFP4 value {} of block {} (scale 2^{}) overflows {}", name, i, block,
                  power, dtype_name(dtype));
      const int64_t at = block * kValuesPerBlock + i;
      if (out_f32) {
        out_f32[at] = value;
      } else {
        out_bf16[at] = float_to_bf16(value);
      }
    }
  }
  return out;
}

}  // namespace titan::checkpoint
