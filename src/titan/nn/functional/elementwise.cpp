// Autograd functions of the elementwise ops (ops/elementwise.h): arithmetic,
// the activations and the gated feed-forward products, and the soft cap.
#include "titan/ops/elementwise.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"

namespace titan::F {

using autograd::record;

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = ops::add(a, b);
  record("AddBackward", {&a, &b}, {&y}, [](const auto& g) { return std::vector<Tensor>{g[0], g[0]}; });
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = ops::sub(a, b);
  record("SubBackward", {&a, &b}, {&y}, [](const auto& g) {
    return std::vector<Tensor>{g[0], ops::scale(g[0], -1.0f)};
  });
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = ops::mul(a, b);
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  const Tensor saved_a = need_b ? a.detach() : Tensor(), saved_b = need_a ? b.detach() : Tensor();
  record("MulBackward", {&a, &b}, {&y}, [=](const auto& g) {
    return std::vector<Tensor>{need_a ? ops::mul(g[0], saved_b) : Tensor(),
                               need_b ? ops::mul(g[0], saved_a) : Tensor()};
  });
  return y;
}

Tensor scale(const Tensor& x, float factor) {
  Tensor y = ops::scale(x, factor);
  record("ScaleBackward", {&x}, {&y},
         [factor](const auto& g) { return std::vector<Tensor>{ops::scale(g[0], factor)}; });
  return y;
}

Tensor silu(const Tensor& x) {
  Tensor y = ops::silu(x);
  const Tensor saved_x = x.detach();
  record("SiluBackward", {&x}, {&y},
         [saved_x](const auto& g) { return std::vector<Tensor>{ops::silu_backward(g[0], saved_x)}; });
  return y;
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  Tensor y = ops::swiglu(gate, up);
  const Tensor saved_gate = gate.detach(), saved_up = up.detach();
  record("SwigluBackward", {&gate, &up}, {&y}, [=](const auto& g) {
    auto [grad_gate, grad_up] = ops::swiglu_backward(g[0], saved_gate, saved_up);
    return std::vector<Tensor>{grad_gate, grad_up};
  });
  return y;
}

Tensor geglu(const Tensor& gate, const Tensor& up) {
  Tensor y = ops::geglu(gate, up);
  const Tensor saved_gate = gate.detach(), saved_up = up.detach();
  record("GegluBackward", {&gate, &up}, {&y}, [=](const auto& g) {
    auto [grad_gate, grad_up] = ops::geglu_backward(g[0], saved_gate, saved_up);
    return std::vector<Tensor>{grad_gate, grad_up};
  });
  return y;
}

Tensor clamped_swiglu(const Tensor& gate, const Tensor& up, float alpha, float limit) {
  Tensor y = ops::clamped_swiglu(gate, up, alpha, limit);
  const Tensor saved_gate = gate.detach(), saved_up = up.detach();
  record("ClampedSwigluBackward", {&gate, &up}, {&y}, [=](const auto& g) {
    auto [grad_gate, grad_up] = ops::clamped_swiglu_backward(g[0], saved_gate, saved_up, alpha, limit);
    return std::vector<Tensor>{grad_gate, grad_up};
  });
  return y;
}

// cap * tanh(x / cap), differentiable; its backward needs only the output.
Tensor soft_cap(const Tensor& x, float cap) {
  Tensor y = ops::soft_cap(x, cap);
  const Tensor saved_y = y.detach();
  record("SoftCapBackward", {&x}, {&y},
         [saved_y, cap](const auto& g) { return std::vector<Tensor>{ops::soft_cap_backward(g[0], saved_y, cap)}; });
  return y;
}

}  // namespace titan::F
