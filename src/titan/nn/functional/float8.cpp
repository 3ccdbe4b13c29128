// The float8 Linear (ops/float8.h, nn/float8_recipe.h): the three GEMMs of a
// Linear, each on operands cast as the recipe says along the dim it reduces.
// As torchao's Float8Linear, forward saves the high-precision x and W and
// backward casts them again for its own GEMMs: a rowwise or MX operand's
// backward cast runs along the other dim, so the forward's cannot be reused.
#include "titan/ops/float8.h"
#include "titan/autograd/function_node.h"
#include "titan/core/trace_context.h"
#include "titan/nn/float8_recipe.h"
#include "titan/nn/functional.h"

namespace titan::F {

using autograd::record;

namespace {

struct CastOperand {
  Tensor values, scale;                                // scale undefined: none to divide by (high precision or MX)
  ops::Float8Format format = ops::Float8Format::e4m3;  // of the cast values, for the tensor-core GEMMs
  // MX: the e8m0 exponents, laid out as values ([R, C / 32] with the blocks along dim 1, or [R / 32, C]).
  Tensor mx_exponents;
};

// `x` cast along `axis` as `cast` says, or as it is when the recipe keeps it
// in high precision. With `dequantize`, an operand whose scales are powers of
// two per slice (rowwise) comes already divided by them (exact), so that the
// GEMM needs no per-row step: its numbers are the same, as powers of two
// commute with f32 rounding (short of overflow and subnormals).
CastOperand cast_operand(const Tensor& x, const std::optional<ops::Float8Cast>& cast, int64_t axis, bool dequantize) {
  if (!cast.has_value()) return {x, Tensor(), ops::Float8Format::e4m3, Tensor()};
  if (dequantize && cast->scaling == ops::Float8Scaling::axiswise && cast->power_of_two_scale) {
    return {ops::float8_fake_quantize(x, *cast, axis), Tensor(), cast->format, Tensor()};
  }
  ops::Float8Operand operand = ops::float8_cast(x, *cast, axis);
  if (cast->scaling == ops::Float8Scaling::mx_block) {
    return {operand.values, Tensor(), cast->format, operand.scale};
  }
  return {operand.values, operand.scale, cast->format, Tensor()};
}

CastOperand transposed(CastOperand operand) {
  operand.values = operand.values.transpose(0, 1);
  if (operand.mx_exponents.defined()) operand.mx_exponents = operand.mx_exponents.transpose(0, 1);
  return operand;
}

bool fp8_pair(const CastOperand& a, const CastOperand& b) {
  return !(a.format == ops::Float8Format::e5m2 && b.format == ops::Float8Format::e5m2);
}

// a [M, K] @ b [K, N] of two cast operands. With `tensor_cores` on a GPU
// that has them, two scaled operands run cuBLASLt's FP8 GEMM on their codes
// (K-major copies; the values are on the fp8 grid, so the codes are exact)
// and two MX operands its block-scaled one (their codes and exponents,
// K-major); otherwise the bf16 GEMM of the values, the same numbers. A
// high-precision operand meeting a cast one is rounded to bf16 (no recipe
// here does that).
Tensor product(const CastOperand& a, const CastOperand& b, DType out_dtype, bool tensor_cores) {
  Tensor left = a.values, right = b.values;
  if (tensor_cores && a.scale.defined() && b.scale.defined() && left.size(1) % 16 == 0 && fp8_pair(a, b) &&
      ops::float8_tensor_cores(left.device())) {
    return ops::float8_tensor_core_mm(left.contiguous().to(ops::float8_dtype(a.format)), a.scale,
                                      right.transpose(0, 1).contiguous().to(ops::float8_dtype(b.format)), b.scale,
                                      out_dtype);
  }
  if (tensor_cores && a.mx_exponents.defined() && b.mx_exponents.defined() && fp8_pair(a, b) &&
      ops::mx_tensor_cores(left.device())) {
    const Tensor a_exponents = a.mx_exponents.contiguous(), b_exponents = b.mx_exponents.transpose(0, 1).contiguous();
    return ops::mx_tensor_core_mm(ops::float8_mx_codes(left.contiguous(), a_exponents, a.format), a_exponents,
                                  ops::float8_mx_codes(right.transpose(0, 1).contiguous(), b_exponents, b.format),
                                  b_exponents, out_dtype);
  }
  if (left.dtype() != right.dtype()) {
    left = left.to(DType::bf16);
    right = right.to(DType::bf16);
  }
  return ops::float8_scaled_mm(left, a.scale, right, b.scale, out_dtype);
}

bool is_tensorwise_e4m3(const std::optional<ops::Float8Cast>& cast) {
  return cast.has_value() && cast->scaling == ops::Float8Scaling::tensorwise &&
         cast->format == ops::Float8Format::e4m3 && !cast->power_of_two_scale;
}

}  // namespace

ops::Float8Operand float8_cast_weight(const Tensor& x, DType compute_dtype) {
  const Tensor flat = x.contiguous().view({1, -1});
  ops::Float8Operand operand = ops::float8_cast(flat, ops::Float8Cast{}, 1);
  operand.values = operand.values.view(x.shape()).to(compute_dtype);  // exact: fp8 values are bf16 values
  const DType x_dtype = x.dtype();
  record("Float8CastWeightBackward", {&x}, {&operand.values},
         [x_dtype](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].to(x_dtype)}; });
  return operand;
}

Tensor float8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const nn::Float8LinearRecipe& recipe,
                     const Tensor& weight_scale) {
  TITAN_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
              "float8_linear: input {} does not match weight {} ([out, in])", shape_str(x.shape()),
              shape_str(weight.shape()));
  const int64_t in = weight.size(1), out = weight.size(0);
  const Tensor x2 = x.reshape({-1, in}).contiguous();
  Shape out_shape = x.shape();
  out_shape.back() = out;
  const Tensor w = weight.contiguous();
  const bool precast = weight_scale.defined();
  // MX's weight gradient reduces over the tokens in blocks of 32: say which layer, before any work is done.
  TITAN_CHECK(!recipe.uses_mx_blocks() || !weight.requires_grad() || x2.size(0) % ops::kMxBlockSize == 0,
              "quantize.linear.mx: {} reduces its weight gradient over {} tokens, which MXFP8's blocks of {} do not "
              "divide; add it to quantize.linear.mx.filter_fqns, or make each batch's tokens a multiple of {}",
              trace::current_module() != nullptr ? *trace::current_module() : std::string("a Linear"), x2.size(0),
              ops::kMxBlockSize, ops::kMxBlockSize);
  TITAN_CHECK(!precast || (is_tensorwise_e4m3(recipe.weight) && is_tensorwise_e4m3(recipe.weight_for_grad_input)),
              "float8_linear: a weight cast already (FSDP's float8 all-gather) needs a recipe casting W tensorwise to "
              "e4m3, not '{}'",
              recipe.name);
  // Rowwise operands go to the GEMMs dequantized unless fp8 tensor cores take their codes and scales.
  const bool dequantize = !(recipe.tensor_cores && ops::float8_tensor_cores(x.device()));
  const auto operand = [dequantize](const Tensor& t, const std::optional<ops::Float8Cast>& cast, int64_t axis) {
    return cast_operand(t, cast, axis, dequantize);
  };
  // W cast for the GEMM reducing over `axis`: the tensorwise cast is the same along either.
  const auto weight_operand = [precast, weight_scale, operand](
                                  const Tensor& w, const std::optional<ops::Float8Cast>& cast, int64_t axis) {
    return precast ? CastOperand{w, weight_scale, ops::Float8Format::e4m3, Tensor()} : operand(w, cast, axis);
  };
  Tensor y = product(operand(x2, recipe.input, 1), transposed(weight_operand(w, recipe.weight, 1)), x.dtype(),
                     recipe.tensor_cores)
                 .view(out_shape);  // x [M, in] @ W^T [in, out], W cast along in
  const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
  const Tensor saved_x = need_w ? x2.detach() : Tensor(), saved_w = need_x ? w.detach() : Tensor();
  const Shape x_shape = x.shape();
  const DType x_dtype = x.dtype(), w_dtype = weight.dtype();
  record("Float8LinearBackward", {&x, &weight}, {&y}, [=](const std::vector<Tensor>& g) {
    const Tensor g2 = g[0].reshape({-1, out}).contiguous();
    Tensor grad_x, grad_w;
    if (need_x && autograd::input_grad_wanted(0)) {  // gy [M, out] @ W [out, in], reduced over out
      grad_x = product(operand(g2, recipe.grad_output, 1), weight_operand(saved_w, recipe.weight_for_grad_input, 0),
                       x_dtype, recipe.tensor_cores)
                   .view(x_shape);
    }
    if (need_w && autograd::input_grad_wanted(1)) {  // gy^T [out, M] @ x [M, in], reduced over the tokens
      grad_w = product(transposed(operand(g2, recipe.grad_output_for_grad_weight, 0)),
                       operand(saved_x, recipe.input_for_grad_weight, 0), w_dtype, recipe.tensor_cores);
    }
    return std::vector<Tensor>{grad_x, grad_w};
  });
  // torchao adds the bias after the scaled GEMM, in the output's precision.
  return bias.defined() ? add(y, expand(cast(bias, y.dtype()), out_shape)) : y;
}

}  // namespace titan::F
