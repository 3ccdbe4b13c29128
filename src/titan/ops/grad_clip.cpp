#include "titan/ops/grad_clip.h"

#include "titan/core/trace_context.h"

#include "titan/ops/checks.h"

namespace titan::ops {

Tensor clip_scalars(const Tensor& sum_squares, double max_norm) {
  const trace::OpScope op_scope("clip_scalars");
  check_defined("clip_scalars", sum_squares, "sum of squares");
  check_dtype("clip_scalars", sum_squares, {DType::f32}, "sum of squares");
  TITAN_CHECK(sum_squares.numel() == 1, "clip_scalars: the sum of squares has {} elements, expected 1",
              sum_squares.numel());
  Tensor out = Tensor::empty({2}, DType::f32, sum_squares.device());
  if (!out.device().is_meta()) clip_scalars_kernels(out.device(), out, sum_squares.contiguous(), max_norm);
  return out;
}

void scale_by(const Tensor& out, const Tensor& x, const Tensor& factors, int64_t index) {
  check_defined("scale_by", x, "input");
  check_defined("scale_by", factors, "factors");
  check_same_shape("scale_by", out, x);
  check_same_dtype("scale_by", out, x);
  check_same_device("scale_by", out, x);
  check_same_device("scale_by", x, factors);
  check_dtype("scale_by", x, {DType::f32, DType::bf16}, "input");
  check_dtype("scale_by", factors, {DType::f32}, "factors");
  check_contiguous("scale_by", out, "output");
  check_contiguous("scale_by", x, "input");
  check_contiguous("scale_by", factors, "factors");
  TITAN_CHECK(index >= 0 && index < factors.numel(), "scale_by: factor index {} outside the {} factors", index,
              factors.numel());
  if (!out.device().is_meta()) scale_by_kernels(out.device(), out, x, factors, index);
}

Tensor scaled_by(const Tensor& x, const Tensor& factors, int64_t index) {
  const trace::OpScope op_scope("scaled_by");
  // On the CPU the factor is readable for free: a factor of 1 (no gradient
  // accumulation, no clipping) returns x itself instead of a copy.
  if (x.device().is_cpu() && factors.device().is_cpu() && index >= 0 && index < factors.numel() &&
      factors.dtype() == DType::f32 && factors.is_contiguous() && factors.data<float>()[index] == 1.0f) {
    return x;
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  scale_by(out, x.contiguous(), factors, index);
  return out;
}

void scale_all_by_(std::span<const Tensor> tensors, const Tensor& factors, int64_t index) {
  for (const Tensor& t : tensors) scale_by(t, t, factors, index);
}

}  // namespace titan::ops
