#include "titan/ops/float8.h"

#include "titan/core/trace_context.h"
#include "titan/ops/checks.h"
#include "titan/ops/gemm.h"

namespace titan::ops {

float float8_max(Float8Format format) { return format == Float8Format::e4m3 ? 448.0f : 57344.0f; }

const char* float8_format_name(Float8Format format) { return format == Float8Format::e4m3 ? "e4m3" : "e5m2"; }

Float8Operand float8_cast(const Tensor& x, const Float8Cast& cast, int64_t axis) {
  const trace::OpScope op_scope("float8_cast");
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
  if (!x.device().is_meta()) float8_cast_kernels(x.device(), result.values, result.scale, x.contiguous(), cast, axis);
  return result;
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

}  // namespace titan::ops
