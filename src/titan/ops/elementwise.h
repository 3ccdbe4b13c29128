// Elementwise arithmetic and activations. Operands share shape and dtype
// (f32 or bf16; bf16 math runs in f32 and rounds once), except the in-place
// accumulate add_, which also takes a bf16 source into an f32 destination.
#pragma once

#include <utility>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& a, float factor);
void add_(const Tensor& dst, const Tensor& src, float alpha = 1.0f);  // dst += alpha * src
void scale_(const Tensor& dst, float factor);                         // dst *= factor

// silu(x) = x * sigmoid(x); swiglu(gate, up) = silu(gate) * up (the Llama FFN).
Tensor silu(const Tensor& x);
Tensor silu_backward(const Tensor& grad_out, const Tensor& x);
Tensor swiglu(const Tensor& gate, const Tensor& up);
std::pair<Tensor, Tensor> swiglu_backward(const Tensor& grad_out, const Tensor& gate, const Tensor& up);
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (PyTorch's
// gelu(approximate="tanh")); geglu(gate, up) = gelu_tanh(gate) * up (the Gemma FFN).
Tensor geglu(const Tensor& gate, const Tensor& up);
std::pair<Tensor, Tensor> geglu_backward(const Tensor& grad_out, const Tensor& gate, const Tensor& up);
// gpt-oss's clamped SwiGLU (its experts' activation): with g = min(gate, limit)
// and u = clamp(up, -limit, limit), out = g * sigmoid(alpha * g) * (u + 1).
// The clamps pass gradient where the input lies within the bounds, ends
// included (as torch.clamp's backward).
Tensor clamped_swiglu(const Tensor& gate, const Tensor& up, float alpha, float limit);
std::pair<Tensor, Tensor> clamped_swiglu_backward(const Tensor& grad_out, const Tensor& gate, const Tensor& up,
                                                  float alpha, float limit);
// soft_cap(x) = cap * tanh(x / cap), cap > 0 (Gemma 2's logit soft-capping).
// The backward takes the output y: dx = dy * (1 - (y / cap)^2).
Tensor soft_cap(const Tensor& x, float cap);
Tensor soft_cap_backward(const Tensor& grad_out, const Tensor& y, float cap);

enum class BinaryOp { add, sub, mul };
// out = a (op) alpha * b for add/sub; out = a * b for mul. out may alias a.
using BinaryKernel = void(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, float alpha);
using ScaleKernel = void(const Tensor& out, const Tensor& a, float factor);
using SiluKernel = void(const Tensor& out, const Tensor& x);
using SiluBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x);
using SwigluKernel = void(const Tensor& out, const Tensor& gate, const Tensor& up);
using SwigluBackwardKernel = void(const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out,
                                  const Tensor& gate, const Tensor& up);
// The gated activations share one kernel signature each for forward and backward.
using GegluKernel = SwigluKernel;
using GegluBackwardKernel = SwigluBackwardKernel;
inline Op<BinaryKernel> binary_kernels{"binary"};
inline Op<ScaleKernel> scale_kernels{"scale"};
inline Op<SiluKernel> silu_kernels{"silu"};
inline Op<SiluBackwardKernel> silu_backward_kernels{"silu_backward"};
inline Op<SwigluKernel> swiglu_kernels{"swiglu"};
inline Op<SwigluBackwardKernel> swiglu_backward_kernels{"swiglu_backward"};
inline Op<GegluKernel> geglu_kernels{"geglu"};
inline Op<GegluBackwardKernel> geglu_backward_kernels{"geglu_backward"};
using ClampedSwigluKernel = void(const Tensor& out, const Tensor& gate, const Tensor& up, float alpha, float limit);
using ClampedSwigluBackwardKernel = void(const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out,
                                         const Tensor& gate, const Tensor& up, float alpha, float limit);
inline Op<ClampedSwigluKernel> clamped_swiglu_kernels{"clamped_swiglu"};
inline Op<ClampedSwigluBackwardKernel> clamped_swiglu_backward_kernels{"clamped_swiglu_backward"};
using SoftCapKernel = void(const Tensor& out, const Tensor& x, float cap);
using SoftCapBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, float cap);
inline Op<SoftCapKernel> soft_cap_kernels{"soft_cap"};
inline Op<SoftCapBackwardKernel> soft_cap_backward_kernels{"soft_cap_backward"};

}  // namespace titan::ops
