// Autograd functions over the GEMM (ops/gemm.h): linear (PyTorch's F.linear,
// the GEMM with a transposed weight and an optional bias) and matmul.
#include "titan/ops/gemm.h"
#include "titan/autograd/function_node.h"
#include "titan/autograd/saved_ops.h"
#include "titan/core/copy.h"
#include "titan/nn/functional.h"

namespace titan::F {

using autograd::record;

// A bias is copied into every output row first and the GEMM accumulates onto
// it (beta = 1): the sum is formed in f32 and rounded once, and no separate
// broadcast add runs. Its gradient, the output gradient summed over rows, is a
// GEMM with a row of ones (a parallel, f32-accumulated column sum).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  TITAN_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
              "linear: input {} does not match weight {} ([out, in])", shape_str(x.shape()), shape_str(weight.shape()));
  const int64_t in = weight.size(1), out = weight.size(0);
  const bool has_bias = bias.defined();
  TITAN_CHECK(!has_bias || (bias.dim() == 1 && bias.size(0) == out), "linear: bias {} does not match weight {}",
              has_bias ? shape_str(bias.shape()) : std::string(), shape_str(weight.shape()));
  const Tensor x2 = x.reshape({-1, in});
  Shape out_shape = x.shape();
  out_shape.back() = out;
  // Per-op selective checkpointing may hand back this output from the forward (autograd/saved_ops.h).
  Tensor y = autograd::run_saved_op(autograd::SavedOpKind::matmul, weight.shape(), [&] {
    if (!has_bias) return std::vector<Tensor>{ops::matmul(x2, weight.transpose(0, 1)).view(out_shape)};
    Tensor y2 = Tensor::empty({x2.size(0), out}, x.dtype(), x.device());
    titan::copy_(y2, bias.reshape({1, out}).expand({x2.size(0), out}));
    ops::gemm(x2, weight.transpose(0, 1), y2, 1.0f, 1.0f);
    return std::vector<Tensor>{y2.view(out_shape)};
  })[0];
  const bool need_x = x.requires_grad(), need_w = weight.requires_grad(), need_b = has_bias && bias.requires_grad();
  const Tensor saved_x = need_w ? x2.detach() : Tensor(), saved_w = need_x ? weight.detach() : Tensor();
  const Shape x_shape = x.shape();
  const Shape bias_shape = has_bias ? bias.shape() : Shape{};
  const DType bias_dtype = has_bias ? bias.dtype() : x.dtype();
  const auto body = [=](const std::vector<Tensor>& g) {
    const Tensor g2 = g[0].reshape({-1, out});
    Tensor grad_x = need_x && autograd::input_grad_wanted(0) ? ops::matmul(g2, saved_w).view(x_shape) : Tensor();
    Tensor grad_w = need_w && autograd::input_grad_wanted(1) ? ops::matmul(g2.transpose(0, 1), saved_x) : Tensor();
    Tensor grad_b;
    if (need_b && autograd::input_grad_wanted(2)) {  // ones [1, M] @ g2 [M, out], accumulated in f32
      const Tensor ones = Tensor::full({1, g2.size(0)}, 1.0, g2.dtype(), g2.device());
      grad_b = ops::matmul(ones, g2, bias_dtype).view(bias_shape);
    }
    if (!has_bias) return std::vector<Tensor>{grad_x, grad_w};
    return std::vector<Tensor>{grad_x, grad_w, grad_b};
  };
  // Without a bias the node keeps its two inputs, as it always had.
  if (has_bias) {
    record("LinearBackward", {&x, &weight, &bias}, {&y}, body);
  } else {
    record("LinearBackward", {&x, &weight}, {&y}, body);
  }
  return y;
}

// Gradients of a 2-d operand broadcast over the other's batch are summed over
// that batch, done as one GEMM over the flattened batch.
Tensor matmul(const Tensor& a, const Tensor& b) {
  TITAN_CHECK((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3) &&
                  (a.dim() == 2 || b.dim() == 2 || a.size(0) == b.size(0)),
              "matmul: unsupported operand shapes {} and {}", shape_str(a.shape()), shape_str(b.shape()));
  Tensor y = ops::matmul(a, b);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  const Tensor saved_a = need_b ? a.detach() : Tensor(), saved_b = need_a ? b.detach() : Tensor();
  const bool a_broadcast = a.dim() == 2 && b.dim() == 3, b_broadcast = a.dim() == 3 && b.dim() == 2;
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  record("MatmulBackward", {&a, &b}, {&y}, [=](const auto& g) {
    const Tensor& grad = g[0];
    Tensor grad_a, grad_b;
    if (need_a && autograd::input_grad_wanted(0)) {
      if (a_broadcast) {  // dA = sum_b g_b @ b_b^T = [M, B*N] @ [B*N, K]
        const Tensor g_flat = grad.permute({1, 0, 2}).reshape({m, -1});
        const Tensor b_flat = saved_b.permute({1, 0, 2}).reshape({k, -1});
        grad_a = ops::matmul(g_flat, b_flat.transpose(0, 1));
      } else {
        grad_a = ops::matmul(grad, saved_b.transpose(-1, -2));
      }
    }
    if (need_b && autograd::input_grad_wanted(1)) {
      if (b_broadcast) {  // dB = sum_b a_b^T @ g_b = [K, B*M] @ [B*M, N]
        grad_b = ops::matmul(saved_a.reshape({-1, k}).transpose(0, 1), grad.reshape({-1, n}));
      } else {
        grad_b = ops::matmul(saved_a.transpose(-1, -2), grad);
      }
    }
    return std::vector<Tensor>{grad_a, grad_b};
  });
  return y;
}

}  // namespace titan::F
