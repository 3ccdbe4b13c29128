// The MoE experts' float8 and MXFP8 grouped GEMM (torchao's MoE training,
// TorchTitan's quantize.grouped_mm converters) as the plain grouped GEMM of
// fake-quantized operands (ops::float8_fake_quantize): with power-of-two
// scales that is the scaled fp8 GEMM exactly, and it needs no grouped
// unscaling step. Like torchao, forward saves x and w in high precision and
// backward casts them again along the other dims.
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"
#include "titan/ops/float8.h"
#include "titan/ops/grouped_gemm.h"

namespace titan::F {

using autograd::record;

namespace {

// w [E, out, in] cast per expert along in (axis 1 of its rows), or along out (down each expert's out rows).
Tensor weight_along_in(const Tensor& w, const ops::Float8Cast& cast) {
  return ops::float8_fake_quantize(w.contiguous().view({-1, w.size(2)}), cast, 1).view(w.shape());
}

Tensor weight_along_out(const Tensor& w, const ops::Float8Cast& cast) {
  const Tensor rows_per_expert = Tensor::full({w.size(0)}, static_cast<double>(w.size(1)), DType::i64, w.device());
  return ops::float8_fake_quantize_groups(w.contiguous().view({-1, w.size(2)}), rows_per_expert, cast).view(w.shape());
}

}  // namespace

Tensor float8_grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& counts, const ops::Float8Cast& cast) {
  TITAN_CHECK(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2) && counts.numel() == w.size(0),
              "float8_grouped_gemm: rows {} and expert weights {} ([E, out, in]) with {} counts do not match",
              shape_str(x.shape()), shape_str(w.shape()), counts.numel());
  const DType dtype = x.dtype();
  const Tensor x2 = x.contiguous();
  Tensor y =
      ops::grouped_gemm(ops::float8_fake_quantize(x2, cast, 1).to(dtype), weight_along_in(w, cast).to(dtype), counts);
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const Tensor saved_x = need_w ? x2.detach() : Tensor(), saved_w = need_x ? w.detach() : Tensor();
  const Tensor saved_counts = counts.detach();
  record("Float8GroupedGemmBackward", {&x, &w}, {&y}, [=](const std::vector<Tensor>& g) {
    const Tensor grad = g[0].contiguous();
    const DType grad_dtype = grad.dtype();
    Tensor grad_x, grad_w;
    if (need_x && autograd::input_grad_wanted(0)) {  // grad_y_e [n, out] @ w[e] [out, in], reduced over out
      grad_x = ops::grouped_gemm_input_grad(ops::float8_fake_quantize(grad, cast, 1).to(grad_dtype),
                                            weight_along_out(saved_w, cast).to(grad_dtype), saved_counts);
    }
    if (need_w && autograd::input_grad_wanted(1)) {  // grad_y_e^T @ x_e, reduced over expert e's tokens
      grad_w = ops::grouped_gemm_weight_grad(
          ops::float8_fake_quantize_groups(grad, saved_counts, cast).to(grad_dtype),
          ops::float8_fake_quantize_groups(saved_x, saved_counts, cast).to(grad_dtype), saved_counts);
    }
    return std::vector<Tensor>{grad_x, grad_w};
  });
  return y;
}

}  // namespace titan::F
