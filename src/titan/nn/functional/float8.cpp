// The float8 Linear (ops/float8.h, nn/float8_recipe.h): the three GEMMs of a
// Linear, each on operands cast as the recipe says along the dim it reduces.
// As torchao's Float8Linear, forward saves the high-precision x and W and
// backward casts them again for its own GEMMs: a rowwise or MX operand's
// backward cast runs along the other dim, so the forward's cannot be reused.
#include "titan/ops/float8.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/float8_recipe.h"
#include "titan/nn/functional.h"

namespace titan::F {

using autograd::record;

namespace {

struct CastOperand {
  Tensor values, scale;         // scale undefined: none to divide by (high precision or MX)
  DType codes = DType::f8e4m3;  // the fp8 format of scaled values, for the tensor-core GEMM
};

DType codes_of(ops::Float8Format format) { return format == ops::Float8Format::e4m3 ? DType::f8e4m3 : DType::f8e5m2; }

// `x` cast along `axis` as `cast` says, or as it is when the recipe keeps it in high precision.
CastOperand cast_operand(const Tensor& x, const std::optional<ops::Float8Cast>& cast, int64_t axis) {
  if (!cast.has_value()) return {x, Tensor()};
  ops::Float8Operand operand = ops::float8_cast(x, *cast, axis);
  if (cast->scaling == ops::Float8Scaling::mx_block) return {operand.values, Tensor()};
  return {operand.values, operand.scale, codes_of(cast->format)};
}

// a [M, K] @ b [K, N] of two cast operands. With `tensor_cores` and two
// scaled operands on a GPU that has them, cuBLASLt's FP8 GEMM on their codes
// (K-major copies; the values are on the fp8 grid, so the codes are exact);
// otherwise the bf16 GEMM of the values, the same numbers. A high-precision
// operand meeting a cast one is rounded to bf16 (no recipe here does that).
Tensor product(const CastOperand& a, const CastOperand& b, DType out_dtype, bool tensor_cores) {
  Tensor left = a.values, right = b.values;
  if (tensor_cores && a.scale.defined() && b.scale.defined() && left.size(1) % 16 == 0 &&
      !(a.codes == DType::f8e5m2 && b.codes == DType::f8e5m2) && ops::float8_tensor_cores(left.device())) {
    return ops::float8_tensor_core_mm(left.contiguous().to(a.codes), a.scale,
                                      right.transpose(0, 1).contiguous().to(b.codes), b.scale, out_dtype);
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
  TITAN_CHECK(!precast || (is_tensorwise_e4m3(recipe.weight) && is_tensorwise_e4m3(recipe.weight_for_grad_input)),
              "float8_linear: a weight cast already (FSDP's float8 all-gather) needs a recipe casting W tensorwise to "
              "e4m3, not '{}'",
              recipe.name);
  // W cast for the GEMM reducing over `axis`: the tensorwise cast is the same along either.
  const auto weight_operand = [precast, weight_scale](const Tensor& w, const std::optional<ops::Float8Cast>& cast,
                                                      int64_t axis) {
    return precast ? CastOperand{w, weight_scale, DType::f8e4m3} : cast_operand(w, cast, axis);
  };
  Tensor y = product(
                 cast_operand(x2, recipe.input, 1),
                 [&] {  // W^T [in, out], cast along in
                   CastOperand wt = weight_operand(w, recipe.weight, 1);
                   wt.values = wt.values.transpose(0, 1);
                   return wt;
                 }(),
                 x.dtype(), recipe.tensor_cores)
                 .view(out_shape);
  const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
  const Tensor saved_x = need_w ? x2.detach() : Tensor(), saved_w = need_x ? w.detach() : Tensor();
  const Shape x_shape = x.shape();
  const DType x_dtype = x.dtype(), w_dtype = weight.dtype();
  record("Float8LinearBackward", {&x, &weight}, {&y}, [=](const std::vector<Tensor>& g) {
    const Tensor g2 = g[0].reshape({-1, out}).contiguous();
    Tensor grad_x, grad_w;
    if (need_x && autograd::input_grad_wanted(0)) {  // gy [M, out] @ W [out, in], reduced over out
      grad_x = product(cast_operand(g2, recipe.grad_output, 1),
                       weight_operand(saved_w, recipe.weight_for_grad_input, 0), x_dtype, recipe.tensor_cores)
                   .view(x_shape);
    }
    if (need_w && autograd::input_grad_wanted(1)) {  // gy^T [out, M] @ x [M, in], reduced over the tokens
      CastOperand gt = cast_operand(g2, recipe.grad_output_for_grad_weight, 0);
      gt.values = gt.values.transpose(0, 1);
      grad_w = product(gt, cast_operand(saved_x, recipe.input_for_grad_weight, 0), w_dtype, recipe.tensor_cores);
    }
    return std::vector<Tensor>{grad_x, grad_w};
  });
  // torchao adds the bias after the scaled GEMM, in the output's precision.
  return bias.defined() ? add(y, expand(cast(bias, y.dtype()), out_shape)) : y;
}

}  // namespace titan::F
