// CUDA elementwise ops (contiguous operands of n elements, f32 or bf16):
// kernels, launchers, Tensor plumbing and registration. The entry points in
// ops/elementwise.cpp have made the inputs contiguous and checked shapes and
// dtypes; here only the dtypes the kernels implement pass.
//
// One grid-stride loop per kernel, f32 math, one rounding on store, as in the
// CPU kernels. sigmoid uses the accurate expf (not __expf, whose error grows
// with |x|), so results agree with the CPU's ~2 ulp exp to a few ulp.
#include <cstdint>

#include "titan/core/dtype.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/float_dtype.h"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/grad_clip.h"

namespace titan::ops::cuda {
namespace {

enum class BinaryKind { add, sub, mul };

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// No __restrict__ on out and a: they may be the same buffer (in-place ops),
// which is safe because each element is read before it is written, by one thread.
template <BinaryKind kOp, typename T, typename B>
__global__ void binary(T* out, const T* a, const B* b, float alpha, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float x = load_f32(a, i), y = load_f32(b, i);
    float r;
    if constexpr (kOp == BinaryKind::add) {
      r = x + alpha * y;
    } else if constexpr (kOp == BinaryKind::sub) {
      r = x - alpha * y;
    } else {
      r = x * y;
    }
    store_f32(out, i, r);
  }
}

// `factor_in_memory` (device memory, may be null) replaces `factor`: the
// clipping factor of a captured step is only known on the device.
template <typename T>
__global__ void scale(T* out, const T* a, float factor, const float* factor_in_memory, int64_t n) {
  if (factor_in_memory != nullptr) factor = *factor_in_memory;
  for (int64_t i = first_index(); i < n; i += grid_stride()) store_f32(out, i, load_f32(a, i) * factor);
}

// One thread: the same double arithmetic the CPU kernel does.
__global__ void clip_scalars(float* out, const float* sum_squares, double max_norm) {
  const double norm = sqrt(static_cast<double>(sum_squares[0]));
  // A non-finite norm leaves the gradients as they are, as on the CPU (see there).
  const double factor = max_norm > 0.0 && isfinite(norm) ? fmin(1.0, max_norm / (norm + 1e-6)) : 1.0;
  out[0] = static_cast<float>(norm);
  out[1] = static_cast<float>(factor);
}

template <typename T>
__global__ void silu(T* __restrict__ out, const T* __restrict__ x, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load_f32(x, i);
    store_f32(out, i, v * sigmoid(v));
  }
}

// d silu(x)/dx = s + x s (1 - s) with s = sigmoid(x).
template <typename T>
__global__ void silu_backward(T* __restrict__ grad_x, const T* __restrict__ grad_out, const T* __restrict__ x,
                              int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load_f32(x, i);
    const float s = sigmoid(v);
    store_f32(grad_x, i, load_f32(grad_out, i) * (s + v * s * (1.0f - s)));
  }
}

// SwiGLU and GeGLU are one gated product, y = gate * s(gate) * up, told
// apart by s, a sigmoid of the gate (as in the CPU kernels): SiLU's
// s = sigmoid(x); tanh-GELU's gelu_tanh(x) = x sigmoid(2u), u = sqrt(2/pi)
// (x + 0.044715 x^3), in the sigmoid form because it has no 1 + tanh(u)
// cancellation for negative x. Both gradients come from one pass that
// recomputes s rather than saving it:
//   d/dup = dy * gate * s,  d/dgate = dy * up * (s + gate s (1 - s) slope)
// with slope = d(inner argument)/dx: 1 for SiLU (a literal the compiler
// folds away, so SwiGLU computes what it did before the two shared code),
// 2u'(x) = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2) for GELU.
struct SiluGate {
  __device__ static float sigmoid_of(float x) { return sigmoid(x); }
  __device__ static float slope(float) { return 1.0f; }
};

constexpr float kGeluTwoSqrt2OverPi = 1.5957691216057308f;  // 2 sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

struct GeluTanhGate {
  __device__ static float sigmoid_of(float x) { return sigmoid(kGeluTwoSqrt2OverPi * (x + kGeluCubic * x * x * x)); }
  __device__ static float slope(float x) { return kGeluTwoSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x); }
};

template <typename Gate, typename T>
__global__ void glu(T* __restrict__ out, const T* __restrict__ gate, const T* __restrict__ up, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load_f32(gate, i);
    store_f32(out, i, v * Gate::sigmoid_of(v) * load_f32(up, i));
  }
}

template <typename Gate, typename T>
__global__ void glu_backward(T* __restrict__ grad_gate, T* __restrict__ grad_up, const T* __restrict__ grad_out,
                             const T* __restrict__ gate, const T* __restrict__ up, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load_f32(gate, i);
    const float s = Gate::sigmoid_of(v);
    const float slope = Gate::slope(v);
    const float d = load_f32(grad_out, i);
    store_f32(grad_up, i, d * v * s);
    store_f32(grad_gate, i, d * load_f32(up, i) * (s + v * s * (1.0f - s) * slope));
  }
}

// gpt-oss's clamped SwiGLU and its backward, as the CPU kernels compute them.
template <typename T>
__global__ void clamped_swiglu(T* __restrict__ out, const T* __restrict__ gate, const T* __restrict__ up, float alpha,
                               float limit, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = fminf(load_f32(gate, i), limit);
    const float w = fminf(fmaxf(load_f32(up, i), -limit), limit);
    store_f32(out, i, v * sigmoid(alpha * v) * (w + 1.0f));
  }
}

template <typename T>
__global__ void clamped_swiglu_backward(T* __restrict__ grad_gate, T* __restrict__ grad_up,
                                        const T* __restrict__ grad_out, const T* __restrict__ gate,
                                        const T* __restrict__ up, float alpha, float limit, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float raw_gate = load_f32(gate, i), raw_up = load_f32(up, i);
    const float v = fminf(raw_gate, limit);
    const float w = fminf(fmaxf(raw_up, -limit), limit);
    const float s = sigmoid(alpha * v);
    const float d = load_f32(grad_out, i);
    store_f32(grad_up, i, raw_up >= -limit && raw_up <= limit ? d * v * s : 0.0f);
    store_f32(grad_gate, i, raw_gate <= limit ? d * (w + 1.0f) * (s + alpha * v * s * (1.0f - s)) : 0.0f);
  }
}

// cap * tanh(x / cap) with the accurate tanhf; the CPU's exp-based tanh
// agrees with it to about cap * 1e-7.
template <typename T>
__global__ void soft_cap(T* __restrict__ out, const T* __restrict__ x, float cap, int64_t n) {
  const float inverse_cap = 1.0f / cap;
  for (int64_t i = first_index(); i < n; i += grid_stride())
    store_f32(out, i, cap * tanhf(load_f32(x, i) * inverse_cap));
}

// d/dx cap tanh(x / cap) = 1 - (y / cap)^2, from the output y.
template <typename T>
__global__ void soft_cap_backward(T* __restrict__ grad_x, const T* __restrict__ grad_out, const T* __restrict__ y,
                                  float cap, int64_t n) {
  const float inverse_cap = 1.0f / cap;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float t = load_f32(y, i) * inverse_cap;
    store_f32(grad_x, i, load_f32(grad_out, i) * (1.0f - t * t));
  }
}

// Calls launch(T{}) with T the element type of `dtype` (f32 or bf16).
template <typename Launch>
cudaError_t with_float_type(DType dtype, int64_t n, Launch&& launch) {
  if (n == 0) return cudaSuccess;
  if (dtype == DType::bf16) {
    launch(__nv_bfloat16{});
  } else {
    launch(float{});
  }
  return cudaGetLastError();
}

template <BinaryKind kOp, typename T, typename B>
void launch_binary_typed(void* out, const void* a, const void* b, float alpha, int64_t n, cudaStream_t stream) {
  binary<kOp><<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                              static_cast<const B*>(b), alpha, n);
}

template <typename T, typename B>
void launch_binary_op(BinaryKind op, void* out, const void* a, const void* b, float alpha, int64_t n,
                      cudaStream_t stream) {
  switch (op) {
    case BinaryKind::add:
      launch_binary_typed<BinaryKind::add, T, B>(out, a, b, alpha, n, stream);
      break;
    case BinaryKind::sub:
      launch_binary_typed<BinaryKind::sub, T, B>(out, a, b, alpha, n, stream);
      break;
    case BinaryKind::mul:
      launch_binary_typed<BinaryKind::mul, T, B>(out, a, b, alpha, n, stream);
      break;
  }
}

// out = a + alpha * b, a - alpha * b, or a * b. out may alias a. `b_dtype` is
// `dtype`, or bf16 with dtype f32 (accumulating a bf16 gradient into f32).
cudaError_t launch_binary(BinaryKind op, DType dtype, DType b_dtype, void* out, const void* a, const void* b,
                          float alpha, int64_t n, cudaStream_t stream) {
  if (dtype == DType::f32 && b_dtype == DType::bf16) {
    return with_float_type(DType::f32, n,
                           [&](auto) { launch_binary_op<float, __nv_bfloat16>(op, out, a, b, alpha, n, stream); });
  }
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    launch_binary_op<T, T>(op, out, a, b, alpha, n, stream);
  });
}

// out = a * factor, or * *factor_in_memory (device memory) when that is not
// null; out may alias a.
cudaError_t launch_scale(DType dtype, void* out, const void* a, float factor, const float* factor_in_memory, int64_t n,
                         cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    scale<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(a), factor,
                                                          factor_in_memory, n);
  });
}

// out[0] = sqrt(sum_squares[0]), out[1] = min(1, max_norm / (norm + 1e-6)) (1 when max_norm <= 0).
cudaError_t launch_clip_scalars(float* out, const float* sum_squares, double max_norm, cudaStream_t stream) {
  clip_scalars<<<1, 1, 0, stream>>>(out, sum_squares, max_norm);
  return cudaGetLastError();
}

cudaError_t launch_silu(DType dtype, void* out, const void* x, int64_t n, cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    silu<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(x), n);
  });
}

cudaError_t launch_silu_backward(DType dtype, void* grad_x, const void* grad_out, const void* x, int64_t n,
                                 cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    silu_backward<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(grad_x), static_cast<const T*>(grad_out), static_cast<const T*>(x), n);
  });
}

// y = gate * s(gate) * up and its two input gradients, s as Gate says.
template <typename Gate>
cudaError_t launch_glu(DType dtype, void* out, const void* gate, const void* up, int64_t n, cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    glu<Gate><<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(gate),
                                                              static_cast<const T*>(up), n);
  });
}

template <typename Gate>
cudaError_t launch_glu_backward(DType dtype, void* grad_gate, void* grad_up, const void* grad_out, const void* gate,
                                const void* up, int64_t n, cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    glu_backward<Gate><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(grad_gate), static_cast<T*>(grad_up), static_cast<const T*>(grad_out),
        static_cast<const T*>(gate), static_cast<const T*>(up), n);
  });
}

// out = cap * tanh(x / cap) (cap > 0); its gradient from the output y: dy * (1 - (y / cap)^2).
cudaError_t launch_soft_cap(DType dtype, void* out, const void* x, float cap, int64_t n, cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    soft_cap<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(x), cap, n);
  });
}

cudaError_t launch_soft_cap_backward(DType dtype, void* grad_x, const void* grad_out, const void* y, float cap,
                                     int64_t n, cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    soft_cap_backward<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(grad_x), static_cast<const T*>(grad_out), static_cast<const T*>(y), cap, n);
  });
}

void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, float alpha) {
  require_float("binary", out);
  require_float("binary", b);
  const BinaryKind kind = op == BinaryOp::add   ? BinaryKind::add
                          : op == BinaryOp::sub ? BinaryKind::sub
                                                : BinaryKind::mul;
  TITAN_CUDA_CHECK(launch_binary(kind, out.dtype(), b.dtype(), out.data_ptr(), a.data_ptr(), b.data_ptr(), alpha,
                                 out.numel(), current_stream()));
}

void scale_kernel(const Tensor& out, const Tensor& a, float factor) {
  require_float("scale", out);
  TITAN_CUDA_CHECK(
      launch_scale(out.dtype(), out.data_ptr(), a.data_ptr(), factor, nullptr, out.numel(), current_stream()));
}

void scale_by_kernel(const Tensor& out, const Tensor& x, const Tensor& factors, int64_t index) {
  require_float("scale_by", out);
  TITAN_CUDA_CHECK(launch_scale(out.dtype(), out.data_ptr(), x.data_ptr(), 0.0f, factors.data<float>() + index,
                                out.numel(), current_stream()));
}

void clip_scalars_kernel(const Tensor& out, const Tensor& sum_squares, double max_norm) {
  TITAN_CUDA_CHECK(launch_clip_scalars(out.data<float>(), sum_squares.data<float>(), max_norm, current_stream()));
}

void silu_kernel(const Tensor& out, const Tensor& x) {
  require_float("silu", out);
  TITAN_CUDA_CHECK(launch_silu(out.dtype(), out.data_ptr(), x.data_ptr(), out.numel(), current_stream()));
}

void silu_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x) {
  require_float("silu_backward", grad_x);
  TITAN_CUDA_CHECK(launch_silu_backward(grad_x.dtype(), grad_x.data_ptr(), grad_out.data_ptr(), x.data_ptr(),
                                        grad_x.numel(), current_stream()));
}

template <typename Gate>
void glu_kernel(const char* op, const Tensor& out, const Tensor& gate, const Tensor& up) {
  require_float(op, out);
  TITAN_CUDA_CHECK(
      launch_glu<Gate>(out.dtype(), out.data_ptr(), gate.data_ptr(), up.data_ptr(), out.numel(), current_stream()));
}

template <typename Gate>
void glu_backward_kernel(const char* op, const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out,
                         const Tensor& gate, const Tensor& up) {
  require_float(op, grad_gate);
  TITAN_CUDA_CHECK(launch_glu_backward<Gate>(grad_gate.dtype(), grad_gate.data_ptr(), grad_up.data_ptr(),
                                             grad_out.data_ptr(), gate.data_ptr(), up.data_ptr(), grad_gate.numel(),
                                             current_stream()));
}

void swiglu_kernel(const Tensor& out, const Tensor& gate, const Tensor& up) {
  glu_kernel<SiluGate>("swiglu", out, gate, up);
}

void swiglu_backward_kernel(const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out, const Tensor& gate,
                            const Tensor& up) {
  glu_backward_kernel<SiluGate>("swiglu_backward", grad_gate, grad_up, grad_out, gate, up);
}

void geglu_kernel(const Tensor& out, const Tensor& gate, const Tensor& up) {
  glu_kernel<GeluTanhGate>("geglu", out, gate, up);
}

void geglu_backward_kernel(const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out, const Tensor& gate,
                           const Tensor& up) {
  glu_backward_kernel<GeluTanhGate>("geglu_backward", grad_gate, grad_up, grad_out, gate, up);
}

void clamped_swiglu_kernel(const Tensor& out, const Tensor& gate, const Tensor& up, float alpha, float limit) {
  require_float("clamped_swiglu", out);
  const int64_t n = out.numel();
  TITAN_CUDA_CHECK(with_float_type(out.dtype(), n, [&](auto tag) {
    using T = decltype(tag);
    clamped_swiglu<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<T*>(out.data_ptr()), static_cast<const T*>(gate.data_ptr()), static_cast<const T*>(up.data_ptr()),
        alpha, limit, n);
  }));
}

void clamped_swiglu_backward_kernel(const Tensor& grad_gate, const Tensor& grad_up, const Tensor& grad_out,
                                    const Tensor& gate, const Tensor& up, float alpha, float limit) {
  require_float("clamped_swiglu_backward", grad_gate);
  const int64_t n = grad_gate.numel();
  TITAN_CUDA_CHECK(with_float_type(grad_gate.dtype(), n, [&](auto tag) {
    using T = decltype(tag);
    clamped_swiglu_backward<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<T*>(grad_gate.data_ptr()), static_cast<T*>(grad_up.data_ptr()),
        static_cast<const T*>(grad_out.data_ptr()), static_cast<const T*>(gate.data_ptr()),
        static_cast<const T*>(up.data_ptr()), alpha, limit, n);
  }));
}

void soft_cap_kernel(const Tensor& out, const Tensor& x, float cap) {
  require_float("soft_cap", out);
  TITAN_CUDA_CHECK(launch_soft_cap(out.dtype(), out.data_ptr(), x.data_ptr(), cap, out.numel(), current_stream()));
}

void soft_cap_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y, float cap) {
  require_float("soft_cap_backward", grad_x);
  TITAN_CUDA_CHECK(launch_soft_cap_backward(grad_x.dtype(), grad_x.data_ptr(), grad_out.data_ptr(), y.data_ptr(), cap,
                                            grad_x.numel(), current_stream()));
}

}  // namespace

void register_elementwise() {
  binary_kernels.set_kernel(DeviceType::cuda, binary_kernel);
  scale_kernels.set_kernel(DeviceType::cuda, scale_kernel);
  scale_by_kernels.set_kernel(DeviceType::cuda, scale_by_kernel);
  clip_scalars_kernels.set_kernel(DeviceType::cuda, clip_scalars_kernel);
  silu_kernels.set_kernel(DeviceType::cuda, silu_kernel);
  silu_backward_kernels.set_kernel(DeviceType::cuda, silu_backward_kernel);
  swiglu_kernels.set_kernel(DeviceType::cuda, swiglu_kernel);
  swiglu_backward_kernels.set_kernel(DeviceType::cuda, swiglu_backward_kernel);
  geglu_kernels.set_kernel(DeviceType::cuda, geglu_kernel);
  geglu_backward_kernels.set_kernel(DeviceType::cuda, geglu_backward_kernel);
  clamped_swiglu_kernels.set_kernel(DeviceType::cuda, clamped_swiglu_kernel);
  clamped_swiglu_backward_kernels.set_kernel(DeviceType::cuda, clamped_swiglu_backward_kernel);
  soft_cap_kernels.set_kernel(DeviceType::cuda, soft_cap_kernel);
  soft_cap_backward_kernels.set_kernel(DeviceType::cuda, soft_cap_backward_kernel);
}

}  // namespace titan::ops::cuda
