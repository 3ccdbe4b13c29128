// Float8 training's two primitives, as torchao defines them (float8/ and
// prototype/mx_formats/): casting an operand to fp8 with a dynamic scale, and
// the scaled GEMM of two cast operands.
//
// The cast of x (2-d, f32 or bf16, [R, C]) for a GEMM that reduces over
// `axis` (1: along each row, the usual [M, K] left operand; 0: down each
// column), in one of three granularities:
//  - tensorwise: one scale for all of x, scale = fmax / max(amax, 1e-12),
//    computed in f64 and rounded to f32 (torchao's amax_to_scale);
//  - axiswise ("rowwise"): one such scale per row (axis 1) or column (axis
//    0), i.e. per slice the GEMM reduces;
//  - mx_block (MXFP8): one power-of-two scale per 32 consecutive elements
//    along `axis`, chosen as the OCP MX spec's (torchao's FLOOR mode):
//    2^(floor(log2(block amax)) - emax) with emax the format's largest
//    exponent (8 for e4m3), an e8m0 exponent clamped to [-127, 128]. Or,
//    with MxScaleRounding::rceil (torchao's RCEIL, the default of its MX
//    grouped GEMMs; cuBLAS's rounding): 2^ceil(log2(amax * f32(1 / fmax))),
//    the smallest power of two keeping the block within fmax, as e8m0
//    rounds the f32 bits up (an f32 subnormal only above 2^-127).
// Tensorwise and axiswise scales may be rounded down to a power of two
// (torchao's round_scales_to_power_of_2, on in its rowwise recipes). Each
// element is then x * scale in f32, clamped to +-fmax (saturation: 448 for
// e4m3, 57344 for e5m2) and rounded to nearest-even onto the fp8 grid
// (core/dtype.h's casts; NaN stays NaN). MX elements are x / 2^e, likewise.
//
// Why the results are bf16: every e4m3 and e5m2 value is exactly a bf16
// value, so the CPU runs an fp8 GEMM as the bf16 GEMM of the fp8 values
// (f32 accumulation, as the hardware's), exactly, and applies the scales
// after. MX values are stored times their block's power-of-two scale, which
// is exact in bf16 too (same exponent range as f32; only results below
// bf16's smallest subnormal, 2^-133, would lose bits) and lets the GEMM need
// no per-block step.
#pragma once

#include <cstdint>
#include <span>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

enum class Float8Format : uint8_t { e4m3, e5m2 };
enum class Float8Scaling : uint8_t { tensorwise, axiswise, mx_block };
enum class MxScaleRounding : uint8_t { floor, rceil };

inline constexpr int64_t kMxBlockSize = 32;

struct Float8Cast {
  Float8Scaling scaling = Float8Scaling::tensorwise;
  Float8Format format = Float8Format::e4m3;
  bool power_of_two_scale = false;                       // tensorwise and axiswise only (MX scales always are)
  MxScaleRounding mx_rounding = MxScaleRounding::floor;  // mx_block only
};

// The format's largest finite value: 448 (e4m3) or 57344 (e5m2).
float float8_max(Float8Format format);
const char* float8_format_name(Float8Format format);
// The dtype of a format's codes (f8e4m3 or f8e5m2), and the format of such a dtype.
inline DType float8_dtype(Float8Format format) { return format == Float8Format::e4m3 ? DType::f8e4m3 : DType::f8e5m2; }
inline Float8Format float8_format_of(DType codes) {
  return codes == DType::f8e4m3 ? Float8Format::e4m3 : Float8Format::e5m2;
}

struct Float8Operand {
  // bf16, x's shape. Tensorwise and axiswise: the fp8 values of x * scale.
  // MX: each fp8 value times its block's scale 2^e (x's approximation).
  Tensor values;
  // f32 scales, x * scale having been cast: [1] (tensorwise), [R] (axiswise
  // over axis 1) or [C] (axis 0). MX: u8 e8m0 exponents (biased by 127, 255
  // for a block holding NaN or inf), [R, C / 32] (axis 1) or [R / 32, C]
  // (axis 0): applied already, kept for inspection and for block-scaled GEMMs.
  Tensor scale;
};

// Casts x [R, C] for a GEMM reducing over `axis` (0 or 1). MX needs the
// reduced dim divisible by 32 (the caller names the key that set it).
Float8Operand float8_cast(const Tensor& x, const Float8Cast& cast, int64_t axis);

// x's fp8 approximation for a GEMM reducing over `axis`, dequantized: each
// cast value divided by its scale, bf16, x's shape. Only for casts whose
// scales are powers of two (axiswise or tensorwise with power_of_two_scale,
// or MX): dividing by one is exact, and so a GEMM of dequantized operands
// with f32 accumulation equals the scaled GEMM of the cast values, the
// scales applied after (powers of two commute with f32 rounding, short of
// overflow and subnormals). The MoE grouped GEMMs run that way.
Tensor float8_fake_quantize(const Tensor& x, const Float8Cast& cast, int64_t axis);

// The same for a GEMM reducing over the rows of each group of x [N, C]: the
// rows come in groups of counts[g] (i64 [G], read by the kernel, never the
// host), as the MoE weight gradient's tokens per expert. Axiswise: one scale
// per group and column. MX: blocks of 32 rows from each group's first, the
// last one short: what zero rows padding each group to a multiple of 32
// (TorchTitan's token-group alignment) would give the real rows, as a zero
// changes no block's amax. Power-of-two scales only, as above.
Tensor float8_fake_quantize_groups(const Tensor& x, const Tensor& counts, const Float8Cast& cast);

// out [M, N] = (a @ b) / (a_scale (x) b_scale) in `out_dtype` (f32 or bf16):
// a [M, K] and b [K, N] bf16 (cast values; b may be a transposed view),
// a_scale f32 [1] or [M] and b_scale f32 [1] or [N], either undefined for 1
// (an MX or high-precision operand). Accumulates in f32, multiplies by the
// scales' f32 reciprocals (cuBLASLt's scale pointers) and rounds once. Where
// the device has float8_scaled_gemm_kernels (the CPU's oneDNN bf16 matmul)
// and a_scale is one value, the GEMM multiplies its accumulators itself
// (binary post-ops), the same operations without an f32 result and a pass
// over it; otherwise the f32 GEMM, then float8_unscale_kernels.
Tensor float8_scaled_mm(const Tensor& a, const Tensor& a_scale, const Tensor& b, const Tensor& b_scale,
                        DType out_dtype);

// The fp8 tensor-core GEMM (cuBLASLt's FP8 matmul, sm_89 and later):
// out [M, N] = (a @ bt^T) / (a_scale (x) b_scale) in `out_dtype` (f32 or
// bf16), a [M, K] and bt [N, K] contiguous fp8 codes (f8e4m3 or f8e5m2, not
// both e5m2: both operands K-major, as cuBLASLt's FP8 kernels want them),
// scales f32 [1] or [M] / [N] (rowwise: cuBLASLt's outer-vector scaling),
// K a multiple of 16. It gives what float8_scaled_mm gives on the decoded
// values (f32 accumulation, no fast accumulation); on the CPU it is that.
Tensor float8_tensor_core_mm(const Tensor& a, const Tensor& a_scale, const Tensor& bt, const Tensor& b_scale,
                             DType out_dtype);
// Whether float8_tensor_core_mm runs on tensor cores on `device` (a GPU of compute capability 8.9 or later).
bool float8_tensor_cores(Device device);

// The block-scaled MXFP8 GEMM (cuBLASLt's VEC32_UE8M0 scaling, sm_100 and
// later; TorchTitan's "mxfp8_cublas"): out [M, N] = a @ bt^T in `out_dtype`
// (f32 or bf16), a [M, K] and bt [N, K] contiguous fp8 codes (K-major, not
// both e5m2), each 32 codes along K multiplied by 2^(e - 127) of their e8m0
// exponent e (a_scales u8 [M, K / 32], b_scales u8 [N, K / 32], as
// float8_cast keeps them). It gives what the bf16 GEMM of the MX values
// gives, f32 accumulation; devices where mx_tensor_cores is false refuse it
// (the Linear then runs that bf16 GEMM itself).
Tensor mx_tensor_core_mm(const Tensor& a, const Tensor& a_scales, const Tensor& bt, const Tensor& b_scales,
                         DType out_dtype);
// Whether mx_tensor_core_mm runs on `device` (a GPU of compute capability 10.0 or later).
bool mx_tensor_cores(Device device);
// The fp8 codes of MX values: values [R, K] (bf16, float8_cast's MX values
// along dim 1: each code times its block's 2^(e - 127)) and their exponents
// u8 [R, K / 32] give codes [R, K] in `format`'s dtype, values / 2^(e - 127)
// exactly (NaN where e is 255).
Tensor float8_mx_codes(const Tensor& values, const Tensor& exponents, Float8Format format);
// Block scales [R, C] (u8) laid out as cuBLASLt reads them for block-scaled
// GEMMs ("1D block scaling factors layout"): R padded with zeros to 128
// rows and C to 4 columns, cut into 128 x 4 tiles stored one after another
// (row of tiles by row of tiles), each tile's element (32 q + p, c) at
// offset 16 p + 4 q + c of its 512 bytes. Flat u8 of the padded size.
Tensor mx_scale_tiles(const Tensor& scales);

// FSDP's float8 all-gather (tensorwise; torchao's WeightWithDynamicFloat8CastTensor):
// each rank casts its shard of a weight with the scale of the whole weight,
// from the max of the shards' amaxes (an all-reduce), and gathers one byte
// per element instead of bf16's two. Its three steps:
//  - float8_amaxes: max |x| of each of `parts` (any shape, f32 or bf16; NaN
//    if any element is, 0 if empty), f32 [parts.size()];
//  - float8_scales_from_amaxes: the tensorwise scales of those amaxes, as
//    float8_cast computes them (f32, amaxes' shape);
//  - float8_encode: codes (f8e4m3 or f8e5m2, x's element count) = x *
//    scales[index], saturated and rounded as float8_cast rounds;
// and float8_decode: values (f32 or bf16) = the codes' fp8 values, exactly.
// codes, x and values are flat and contiguous.
Tensor float8_amaxes(std::span<const Tensor> parts);
Tensor float8_scales_from_amaxes(const Tensor& amaxes, Float8Format format);
void float8_encode(const Tensor& codes, const Tensor& x, const Tensor& scales, int64_t index);
void float8_decode(const Tensor& values, const Tensor& codes);

// Kernels: `values` and `scale` allocated as float8_cast describes; with
// `dequantize`, values hold each cast value divided by its scale instead
// (float8_fake_quantize's, in the same pass; MX values always are).
using Float8CastKernel = void(const Tensor& values, const Tensor& scale, const Tensor& x, const Float8Cast& cast,
                              int64_t axis, bool dequantize);
inline Op<Float8CastKernel> float8_cast_kernels{"float8_cast"};
// out[m, n] = acc[m, n] * (1 / a_scale[m or 0]) * (1 / b_scale[n or 0]); acc f32, out f32 or bf16; undefined scales
// are 1.
using Float8UnscaleKernel = void(const Tensor& out, const Tensor& acc, const Tensor& a_scale, const Tensor& b_scale);
inline Op<Float8UnscaleKernel> float8_unscale_kernels{"float8_unscale"};
// out = a @ b accumulated in f32, times a_scale's reciprocal (undefined or [1]) then b_scale's ([1] or [N];
// undefined: 1), rounded once to out's dtype; a and b bf16 2-d, b possibly a transposed view.
using Float8ScaledGemmKernel = void(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& a_scale,
                                    const Tensor& b_scale);
inline Op<Float8ScaledGemmKernel> float8_scaled_gemm_kernels{"float8_scaled_gemm"};
// values (bf16, x's shape) = x fake-quantized per group along dim 0, as float8_fake_quantize_groups says.
using Float8FakeQuantizeGroupsKernel = void(const Tensor& values, const Tensor& x, const Tensor& counts,
                                            const Float8Cast& cast);
inline Op<Float8FakeQuantizeGroupsKernel> float8_fake_quantize_groups_kernels{"float8_fake_quantize_groups"};
// out = (a @ bt^T) / (a_scale (x) b_scale), the scales f32 [1] or [M] / [N], as float8_tensor_core_mm says.
using Float8TensorCoreMmKernel = void(const Tensor& out, const Tensor& a, const Tensor& a_scale, const Tensor& bt,
                                      const Tensor& b_scale);
inline Op<Float8TensorCoreMmKernel> float8_tensor_core_mm_kernels{"float8_tensor_core_mm"};
// Whether the current device has fp8 tensor cores (registered for CUDA only).
using Float8TensorCoresQuery = bool();
inline Op<Float8TensorCoresQuery> float8_tensor_cores_query{"float8_tensor_cores"};
// out = a @ bt^T with a_tiles and b_tiles (mx_scale_tiles of the scales), as mx_tensor_core_mm says.
using MxTensorCoreMmKernel = void(const Tensor& out, const Tensor& a, const Tensor& a_tiles, const Tensor& bt,
                                  const Tensor& b_tiles);
inline Op<MxTensorCoreMmKernel> mx_tensor_core_mm_kernels{"mx_tensor_core_mm"};
inline Op<Float8TensorCoresQuery> mx_tensor_cores_query{"mx_tensor_cores"};
using Float8MxCodesKernel = void(const Tensor& codes, const Tensor& values, const Tensor& exponents);
inline Op<Float8MxCodesKernel> float8_mx_codes_kernels{"float8_mx_codes"};
using Float8AmaxesKernel = void(const Tensor& out, std::span<const Tensor> parts);
inline Op<Float8AmaxesKernel> float8_amaxes_kernels{"float8_amaxes"};
using Float8ScalesKernel = void(const Tensor& scales, const Tensor& amaxes, Float8Format format);
inline Op<Float8ScalesKernel> float8_scales_kernels{"float8_scales_from_amaxes"};
using Float8EncodeKernel = void(const Tensor& codes, const Tensor& x, const Tensor& scales, int64_t index);
inline Op<Float8EncodeKernel> float8_encode_kernels{"float8_encode"};
using Float8DecodeKernel = void(const Tensor& values, const Tensor& codes);
inline Op<Float8DecodeKernel> float8_decode_kernels{"float8_decode"};

}  // namespace titan::ops
