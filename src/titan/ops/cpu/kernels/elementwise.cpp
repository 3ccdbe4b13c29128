// CPU elementwise kernels on contiguous tensors. Each loop converts to f32,
// computes, and rounds once on store, so bf16 results are the f32 result
// correctly rounded (what PyTorch's bf16 CPU kernels do too).
#include <algorithm>
#include <cmath>

#include "titan/ops/elementwise.h"
#include "titan/ops/grad_clip.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

constexpr int64_t kGrain = 1 << 14;

template <typename D, typename A, typename B>
void binary_loop(BinaryOp op, D* out, const A* a, const B* b, float alpha, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    switch (op) {
      case BinaryOp::add:
        for (int64_t i = begin; i < end; ++i) out[i] = from_f32<D>(to_f32(a[i]) + alpha * to_f32(b[i]));
        break;
      case BinaryOp::sub:
        for (int64_t i = begin; i < end; ++i) out[i] = from_f32<D>(to_f32(a[i]) - alpha * to_f32(b[i]));
        break;
      case BinaryOp::mul:
        for (int64_t i = begin; i < end; ++i) out[i] = from_f32<D>(to_f32(a[i]) * to_f32(b[i]));
        break;
    }
  });
}

void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, float alpha) {
  const int64_t n = out.numel();
  if (out.dtype() == DType::f32 && a.dtype() == DType::f32 && b.dtype() == DType::bf16) {
    binary_loop(op, out.data<float>(), a.data<float>(), b.data<bf16>(), alpha, n);
    return;
  }
  dispatch_float("binary", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    binary_loop(op, out.data<T>(), a.data<T>(), b.data<T>(), alpha, n);
  });
}

void scale_kernel(const Tensor& out, const Tensor& a, float factor) {
  dispatch_float("scale", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const T* x = a.data<T>();
    parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = from_f32<T>(to_f32(x[i]) * factor);
    });
  });
}

// The factor is read from tensor memory, as the CUDA kernel reads it from the device.
void scale_by_kernel(const Tensor& out, const Tensor& x, const Tensor& factors, int64_t index) {
  const float factor = factors.data<float>()[index];
  // Clipping under the limit scales every gradient by 1 in place: nothing to do.
  if (factor == 1.0f && out.data_ptr() == x.data_ptr()) return;
  scale_kernel(out, x, factor);
}

void clip_scalars_kernel(const Tensor& out, const Tensor& sum_squares, double max_norm) {
  const double norm = std::sqrt(static_cast<double>(sum_squares.data<float>()[0]));
  // A non-finite norm leaves the gradients as they are (torch.clamp would make
  // every one NaN): the trainer's non-finite check then names the parameter
  // whose gradient is not finite, and stops or skips the step.
  const double factor = max_norm > 0.0 && std::isfinite(norm) ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
  out.data<float>()[0] = static_cast<float>(norm);
  out.data<float>()[1] = static_cast<float>(factor);
}

void silu_kernel(const Tensor& out, const Tensor& x) {
  dispatch_float("silu", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const T* in = x.data<T>();
    parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float v = to_f32(in[i]);
        o[i] = from_f32<T>(v * sigmoid(v));
      }
    });
  });
}

// d silu(x)/dx = s + x s (1 - s) with s = sigmoid(x).
void silu_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x) {
  dispatch_float("silu_backward", grad_x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* gx = grad_x.data<T>();
    const T* gy = grad_out.data<T>();
    const T* in = x.data<T>();
    parallel_for(grad_x.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float v = to_f32(in[i]);
        const float s = sigmoid(v);
        gx[i] = from_f32<T>(to_f32(gy[i]) * (s + v * s * (1.0f - s)));
      }
    });
  });
}

// SwiGLU and GeGLU are one gated product, y = gate * s(gate) * up, told
// apart by s, a sigmoid of the gate: SiLU's s = sigmoid(x); tanh-GELU's
// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x +
// 0.044715 x^3), in the sigmoid form because it goes through fast_exp (the
// loops vectorise) and has no 1 + tanh(u) cancellation for negative x. Both
// input gradients come from one pass that recomputes s instead of saving it:
//   d/dup = dy * gate * s,  d/dgate = dy * up * (s + gate s (1 - s) slope)
// with slope = d(inner argument)/dx: 1 for SiLU, 2u'(x) = 2 sqrt(2/pi)
// (1 + 3 * 0.044715 x^2) for GELU. SiLU's slope is a literal 1, which the
// compiler folds away, so its loops compute exactly what they did before the
// two shared code. GeGLU's loops carry `omp simd` and SwiGLU's never did:
// kVectorize keeps each as it was, since vector and scalar code may differ in
// NaN payloads.
struct SiluGate {
  static constexpr bool kVectorize = false;
  static float sigmoid_of(float x) { return sigmoid(x); }
  static float slope(float) { return 1.0f; }
};

constexpr float kGeluTwoSqrt2OverPi = 1.5957691216057308f;  // 2 sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

struct GeluTanhGate {
  static constexpr bool kVectorize = true;
  static float sigmoid_of(float x) { return sigmoid(kGeluTwoSqrt2OverPi * (x + kGeluCubic * x * x * x)); }
  static float slope(float x) { return kGeluTwoSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x); }
};

// Runs element(i) over [begin, end), with `omp simd` when Gate asks for it.
template <typename Gate, typename Element>
inline void gated_loop(int64_t begin, int64_t end, Element&& element) {
  if constexpr (Gate::kVectorize) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) element(i);
  } else {
    for (int64_t i = begin; i < end; ++i) element(i);
  }
}

template <typename Gate>
void glu_kernel(const char* op, const Tensor& out, const Tensor& gate, const Tensor& up) {
  dispatch_float(op, out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
      gated_loop<Gate>(begin, end, [&](int64_t i) {
        const float v = to_f32(g[i]);
        o[i] = from_f32<T>(v * Gate::sigmoid_of(v) * to_f32(u[i]));
      });
    });
  });
}

template <typename Gate>
void glu_backward_kernel(const char* op, const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out,
                         const Tensor& gate, const Tensor& up) {
  dispatch_float(op, grad_gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* gg = grad_gate.data<T>();
    T* gu = grad_up.data<T>();
    const T* dy = grad_out.data<T>();
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    parallel_for(grad_gate.numel(), kGrain, [&](int64_t begin, int64_t end) {
      gated_loop<Gate>(begin, end, [&](int64_t i) {
        const float v = to_f32(g[i]);
        const float s = Gate::sigmoid_of(v);
        const float slope = Gate::slope(v);
        const float d = to_f32(dy[i]);
        gu[i] = from_f32<T>(d * v * s);
        gg[i] = from_f32<T>(d * to_f32(u[i]) * (s + v * s * (1.0f - s) * slope));
      });
    });
  });
}

void swiglu_kernel(const Tensor& out, const Tensor& gate, const Tensor& up) {
  glu_kernel<SiluGate>("swiglu", out, gate, up);
}

void swiglu_backward_kernel(const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out, const Tensor& gate,
                            const Tensor& up) {
  glu_backward_kernel<SiluGate>("swiglu_backward", grad_gate, grad_up, grad_out, gate, up);
}

// gpt-oss's clamped SwiGLU: g = min(gate, L), u = clamp(up, -L, L),
// y = g s (u + 1) with s = sigmoid(alpha g); the backward recomputes s:
//   d/dgate = dy (u + 1) (s + alpha g s (1 - s)) where gate <= L, else 0
//   d/dup   = dy g s                             where |up| <= L, else 0.
void clamped_swiglu_kernel(const Tensor& out, const Tensor& gate, const Tensor& up, float alpha, float limit) {
  dispatch_float("clamped_swiglu", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float v = std::min(to_f32(g[i]), limit);
        const float w = std::clamp(to_f32(u[i]), -limit, limit);
        o[i] = from_f32<T>(v * sigmoid(alpha * v) * (w + 1.0f));
      }
    });
  });
}

void clamped_swiglu_backward_kernel(const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out,
                                    const Tensor& gate, const Tensor& up, float alpha, float limit) {
  dispatch_float("clamped_swiglu_backward", grad_gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* gg = grad_gate.data<T>();
    T* gu = grad_up.data<T>();
    const T* dy = grad_out.data<T>();
    const T* g = gate.data<T>();
    const T* u = up.data<T>();
    parallel_for(grad_gate.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float raw_gate = to_f32(g[i]), raw_up = to_f32(u[i]);
        const float v = std::min(raw_gate, limit);
        const float w = std::clamp(raw_up, -limit, limit);
        const float s = sigmoid(alpha * v);
        const float d = to_f32(dy[i]);
        gu[i] = from_f32<T>(raw_up >= -limit && raw_up <= limit ? d * v * s : 0.0f);
        gg[i] = from_f32<T>(raw_gate <= limit ? d * (w + 1.0f) * (s + alpha * v * s * (1.0f - s)) : 0.0f);
      }
    });
  });
}

void geglu_kernel(const Tensor& out, const Tensor& gate, const Tensor& up) {
  glu_kernel<GeluTanhGate>("geglu", out, gate, up);
}

void geglu_backward_kernel(const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out, const Tensor& gate,
                           const Tensor& up) {
  glu_backward_kernel<GeluTanhGate>("geglu_backward", grad_gate, grad_up, grad_out, gate, up);
}

// cap * tanh(x / cap) through fast_exp, so the loop vectorises: tanh(u) =
// sign(u) (1 - e) / (1 + e) with e = exp(-2|u|) <= 1 never overflows.
void soft_cap_kernel(const Tensor& out, const Tensor& x, float cap) {
  dispatch_float("soft_cap", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const T* in = x.data<T>();
    const float inverse_cap = 1.0f / cap;
    parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        const float v = to_f32(in[i]);
        const float e = fast_exp(-2.0f * std::fabs(v * inverse_cap));
        o[i] = from_f32<T>(std::copysign(cap * (1.0f - e) / (1.0f + e), v));
      }
    });
  });
}

// d/dx cap tanh(x / cap) = 1 - tanh^2 = 1 - (y / cap)^2, from the output y.
void soft_cap_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, float cap) {
  dispatch_float("soft_cap_backward", grad_x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* gx = grad_x.data<T>();
    const T* gy = grad_out.data<T>();
    const T* out = y.data<T>();
    const float inverse_cap = 1.0f / cap;
    parallel_for(grad_x.numel(), kGrain, [&](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        const float t = to_f32(out[i]) * inverse_cap;
        gx[i] = from_f32<T>(to_f32(gy[i]) * (1.0f - t * t));
      }
    });
  });
}

}  // namespace

void register_elementwise() {
  binary_kernels.set_kernel(DeviceType::cpu, binary_kernel);
  scale_kernels.set_kernel(DeviceType::cpu, scale_kernel);
  scale_by_kernels.set_kernel(DeviceType::cpu, scale_by_kernel);
  clip_scalars_kernels.set_kernel(DeviceType::cpu, clip_scalars_kernel);
  silu_kernels.set_kernel(DeviceType::cpu, silu_kernel);
  silu_backward_kernels.set_kernel(DeviceType::cpu, silu_backward_kernel);
  swiglu_kernels.set_kernel(DeviceType::cpu, swiglu_kernel);
  swiglu_backward_kernels.set_kernel(DeviceType::cpu, swiglu_backward_kernel);
  geglu_kernels.set_kernel(DeviceType::cpu, geglu_kernel);
  geglu_backward_kernels.set_kernel(DeviceType::cpu, geglu_backward_kernel);
  clamped_swiglu_kernels.set_kernel(DeviceType::cpu, clamped_swiglu_kernel);
  clamped_swiglu_backward_kernels.set_kernel(DeviceType::cpu, clamped_swiglu_backward_kernel);
  soft_cap_kernels.set_kernel(DeviceType::cpu, soft_cap_kernel);
  soft_cap_backward_kernels.set_kernel(DeviceType::cpu, soft_cap_backward_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
