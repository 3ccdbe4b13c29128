// gpt-oss publishes its experts' weights in MXFP4 (OCP Microscaling): each
// row is cut into blocks of 32 values, every value a 4-bit E2M1 float (two to
// a byte, the low nibble first), every block one E8M0 scale byte (the power
// of two 2^(byte - 127)). A checkpoint stores `<name>_blocks` [..., G, 16] u8
// and `<name>_scales` [..., G] u8 for a weight whose rows have G * 32 values.
// titan trains in f32/bf16, so such weights are decoded once, on load. Every
// E2M1 value times a power of two is exact in f32 and bf16 (at most two
// significant bits), so decoding loses nothing unless it overflows, which is
// an error, like the E8M0 NaN byte 0xFF.
#pragma once

#include <string>

#include "titan/core/tensor.h"

namespace titan::checkpoint {

// The E2M1 value of a 4-bit code (bit 3 sign, bits 2-1 exponent with bias 1,
// bit 0 mantissa; exponent 0 is subnormal: 0 or 0.5).
float e2m1_value(uint8_t code);

// blocks [..., G, 16] u8 and scales [..., G] u8 (CPU) -> [..., G * 32] in
// `dtype` (f32 or bf16). `name` names the weight in errors (shape mismatch,
// a NaN scale, a value beyond the dtype's range).
Tensor dequantize_mxfp4(const Tensor& blocks, const Tensor& scales, DType dtype, const std::string& name);

}  // namespace titan::checkpoint
