#include "titan/ops/float8.h"

#include "titan/core/trace_context.h"
#include "titan/ops/checks.h"
#include "titan/ops/gemm.h"

namespace titan::ops {

float float8_max(Float8Format format) { return format == Float8Format::e4m3 ? 448.0f : 57344.0f; }

const char* float8_format_name(Float8Format format) { return format == Float8Format::e4m3 ? "e4m3" : "e5m2"; }

namespace {

Float8Operand cast_operand(const Tensor& x, const Float8Cast& cast, int64_t axis, bool dequantize) {
  check_defined("float8_cast", x, "x");
  check_rank("float8_cast", x, 2, "x");
  check_dtype("float8_cast", x, {DType::f32, DType::bf16}, "x");
  TITAN_CHECK(axis == 0 || axis == 1, "float8_cast: axis must be 0 or 1, got {}", axis);
  const int64_t rows = x.size(0), cols = x.size(1);
  Float8Operand result;
  result.values = Tensor::empty(x.shape(), DType::bf16, x.device());
  switch (cast.scaling) {
    case Float8Scaling::tensorwise:
      result.scale = Tensor::empty({1}, DType::f32, x.device());
      break;
    case Float8Scaling::axiswise:
      result.scale = Tensor::empty({axis == 1 ? rows : cols}, DType::f32, x.device());
      break;
    case Float8Scaling::mx_block: {
      const int64_t reduced = axis == 1 ? cols : rows;
      TITAN_CHECK(reduced % kMxBlockSize == 0,
                  "float8_cast: MXFP8 needs the reduced dim divisible by {}, x is {} reduced over dim {}", kMxBlockSize,
                  shape_str(x.shape()), axis);
      result.scale = Tensor::empty(axis == 1 ? Shape{rows, cols / kMxBlockSize} : Shape{rows / kMxBlockSize, cols},
                                   DType::u8, x.device());
      break;
    }
  }
  if (!x.device().is_meta()) {
    float8_cast_kernels(x.device(), result.values, result.scale, x.contiguous(), cast, axis, dequantize);
  }
  return result;
}

}  // namespace

Float8Operand float8_cast(const Tensor& x, const Float8Cast& cast, int64_t axis) {
  const trace::OpScope op_scope("float8_cast");
  return cast_operand(x, cast, axis, false);
}

namespace {

void check_power_of_two_scales(const char* op, const Float8Cast& cast) {
  TITAN_CHECK(cast.scaling == Float8Scaling::mx_block || cast.power_of_two_scale,
              "{}: dequantizing exactly needs power-of-two scales (MX, or power_of_two_scale)", op);
}

}  // namespace

Tensor float8_fake_quantize(const Tensor& x, const Float8Cast& cast, int64_t axis) {
  const trace::OpScope op_scope("float8_fake_quantize");
  check_power_of_two_scales("float8_fake_quantize", cast);
  return cast_operand(x, cast, axis, true).values;
}

Tensor float8_fake_quantize_groups(const Tensor& x, const Tensor& counts, const Float8Cast& cast) {
  const trace::OpScope op_scope("float8_fake_quantize_groups");
  check_rank("float8_fake_quantize_groups", x, 2, "x");
  check_dtype("float8_fake_quantize_groups", x, {DType::f32, DType::bf16}, "x");
  check_dtype("float8_fake_quantize_groups", counts, {DType::i64}, "counts");
  check_same_device("float8_fake_quantize_groups", counts, x);
  check_power_of_two_scales("float8_fake_quantize_groups", cast);
  TITAN_CHECK(cast.scaling != Float8Scaling::tensorwise,
              "float8_fake_quantize_groups: a tensorwise cast has no groups; use float8_fake_quantize");
  Tensor values = Tensor::empty(x.shape(), DType::bf16, x.device());
  if (!x.device().is_meta()) {
    float8_fake_quantize_groups_kernels(x.device(), values, x.contiguous(), counts.contiguous(), cast);
  }
  return values;
}

namespace {

void check_scale(const Tensor& scale, int64_t size, const char* what) {
  if (!scale.defined()) return;
  check_dtype("float8_scaled_mm", scale, {DType::f32}, what);
  TITAN_CHECK(scale.numel() == 1 || scale.numel() == size, "float8_scaled_mm: {} has {} values, expected 1 or {}", what,
              scale.numel(), size);
}

}  // namespace

Tensor float8_scaled_mm(const Tensor& a, const Tensor& a_scale, const Tensor& b, const Tensor& b_scale,
                        DType out_dtype) {
  const trace::OpScope op_scope("float8_scaled_mm");
  check_rank("float8_scaled_mm", a, 2, "a");
  check_rank("float8_scaled_mm", b, 2, "b");
  TITAN_CHECK(a.size(1) == b.size(0), "float8_scaled_mm: a {} and b {} do not chain", shape_str(a.shape()),
              shape_str(b.shape()));
  check_scale(a_scale, a.size(0), "a_scale");
  check_scale(b_scale, b.size(1), "b_scale");
  if (!a_scale.defined() && !b_scale.defined()) return matmul(a, b, out_dtype);  // MX: the scales are applied
  if ((!a_scale.defined() || a_scale.numel() == 1) && float8_scaled_gemm_kernels.has_kernel(a.device().type) &&
      a.dtype() == DType::bf16 && b.dtype() == DType::bf16) {
    Tensor out = Tensor::empty({a.size(0), b.size(1)}, out_dtype, a.device());
    float8_scaled_gemm_kernels(a.device(), out, a, b, a_scale.defined() ? a_scale.contiguous() : Tensor(),
                               b_scale.defined() ? b_scale.contiguous() : Tensor());
    return out;
  }
  // The scales go on in a pass of their own, not as the GEMM's alpha: they change every step, and a oneDNN
  // primitive is built (and cached) per alpha.
  const Tensor acc = matmul(a, b, DType::f32);
  Tensor out = Tensor::empty(acc.shape(), out_dtype, acc.device());
  if (!acc.device().is_meta()) {
    float8_unscale_kernels(acc.device(), out, acc, a_scale.defined() ? a_scale.contiguous() : Tensor(),
                           b_scale.defined() ? b_scale.contiguous() : Tensor());
  }
  return out;
}

bool float8_tensor_cores(Device device) {
  return device.is_cuda() && float8_tensor_cores_query.has_kernel(DeviceType::cuda) &&
         float8_tensor_cores_query(device);
}

Tensor float8_tensor_core_mm(const Tensor& a, const Tensor& a_scale, const Tensor& bt, const Tensor& b_scale,
                             DType out_dtype) {
  const trace::OpScope op_scope("float8_tensor_core_mm");
  check_rank("float8_tensor_core_mm", a, 2, "a");
  check_rank("float8_tensor_core_mm", bt, 2, "bt");
  check_dtype("float8_tensor_core_mm", a, {DType::f8e4m3, DType::f8e5m2}, "a");
  check_dtype("float8_tensor_core_mm", bt, {DType::f8e4m3, DType::f8e5m2}, "bt");
  check_contiguous("float8_tensor_core_mm", a, "a");
  check_contiguous("float8_tensor_core_mm", bt, "bt");
  check_same_device("float8_tensor_core_mm", bt, a);
  TITAN_CHECK(a.size(1) == bt.size(1), "float8_tensor_core_mm: a {} and bt {} differ in K", shape_str(a.shape()),
              shape_str(bt.shape()));
  TITAN_CHECK(!(a.dtype() == DType::f8e5m2 && bt.dtype() == DType::f8e5m2),
              "float8_tensor_core_mm: two e5m2 operands (cuBLASLt has no such FP8 GEMM)");
  TITAN_CHECK(a.size(1) % 16 == 0, "float8_tensor_core_mm: K = {} is not a multiple of 16", a.size(1));
  TITAN_CHECK(a_scale.defined() && b_scale.defined(), "float8_tensor_core_mm: both scales are needed");
  check_scale(a_scale, a.size(0), "a_scale");
  check_scale(b_scale, bt.size(0), "b_scale");
  if (!float8_tensor_cores(a.device())) {  // the same numbers from the decoded values
    return float8_scaled_mm(a.to(DType::bf16), a_scale, bt.to(DType::bf16).transpose(0, 1), b_scale, out_dtype);
  }
  Tensor out = Tensor::empty({a.size(0), bt.size(0)}, out_dtype, a.device());
  float8_tensor_core_mm_kernels(a.device(), out, a, a_scale.contiguous(), bt, b_scale.contiguous());
  return out;
}

Tensor float8_amaxes(std::span<const Tensor> parts) {
  const trace::OpScope op_scope("float8_amaxes");
  TITAN_CHECK(!parts.empty(), "float8_amaxes: no tensors");
  for (const Tensor& part : parts) {
    check_dtype("float8_amaxes", part, {DType::f32, DType::bf16}, "part");
    check_contiguous("float8_amaxes", part, "part");
    check_same_device("float8_amaxes", part, parts.front());
  }
  Tensor out = Tensor::empty({static_cast<int64_t>(parts.size())}, DType::f32, parts.front().device());
  if (!out.device().is_meta()) float8_amaxes_kernels(out.device(), out, parts);
  return out;
}

Tensor float8_scales_from_amaxes(const Tensor& amaxes, Float8Format format) {
  check_dtype("float8_scales_from_amaxes", amaxes, {DType::f32}, "amaxes");
  check_contiguous("float8_scales_from_amaxes", amaxes, "amaxes");
  Tensor scales = Tensor::empty(amaxes.shape(), DType::f32, amaxes.device());
  if (!scales.device().is_meta()) float8_scales_kernels(scales.device(), scales, amaxes, format);
  return scales;
}

void float8_encode(const Tensor& codes, const Tensor& x, const Tensor& scales, int64_t index) {
  const trace::OpScope op_scope("float8_encode");
  check_dtype("float8_encode", codes, {DType::f8e4m3, DType::f8e5m2}, "codes");
  check_dtype("float8_encode", x, {DType::f32, DType::bf16}, "x");
  check_dtype("float8_encode", scales, {DType::f32}, "scales");
  check_contiguous("float8_encode", codes, "codes");
  check_contiguous("float8_encode", x, "x");
  TITAN_CHECK(codes.numel() == x.numel(), "float8_encode: {} codes for {} values", codes.numel(), x.numel());
  TITAN_CHECK(index >= 0 && index < scales.numel(), "float8_encode: scale {} of {}", index, scales.numel());
  if (!codes.device().is_meta() && codes.numel() > 0) float8_encode_kernels(codes.device(), codes, x, scales, index);
}

void float8_decode(const Tensor& values, const Tensor& codes) {
  const trace::OpScope op_scope("float8_decode");
  check_dtype("float8_decode", values, {DType::f32, DType::bf16}, "values");
  check_dtype("float8_decode", codes, {DType::f8e4m3, DType::f8e5m2}, "codes");
  check_contiguous("float8_decode", values, "values");
  check_contiguous("float8_decode", codes, "codes");
  TITAN_CHECK(codes.numel() == values.numel(), "float8_decode: {} codes for {} values", codes.numel(), values.numel());
  if (!codes.device().is_meta() && codes.numel() > 0) float8_decode_kernels(codes.device(), values, codes);
}

}  // namespace titan::ops
