// CUDA elementwise kernels: one grid-stride loop each, f32 math, one rounding
// on store. sigmoid uses the accurate expf (not __expf, whose error grows with
// |x|), so results agree with the CPU's ~2 ulp exp to a few ulp.
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/elementwise_kernels.cuh"

namespace titan::ops::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t first_index() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

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

template <typename T>
__global__ void swiglu(T* __restrict__ out, const T* __restrict__ gate, const T* __restrict__ up, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load_f32(gate, i);
    store_f32(out, i, v * sigmoid(v) * load_f32(up, i));
  }
}

// Both gradients in one pass, recomputing sigmoid rather than saving silu(gate).
template <typename T>
__global__ void swiglu_backward(T* __restrict__ grad_gate, T* __restrict__ grad_up, const T* __restrict__ grad_out,
                                const T* __restrict__ gate, const T* __restrict__ up, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load_f32(gate, i);
    const float s = sigmoid(v);
    const float d = load_f32(grad_out, i);
    store_f32(grad_up, i, d * v * s);
    store_f32(grad_gate, i, d * load_f32(up, i) * (s + v * s * (1.0f - s)));
  }
}

// gelu_tanh(x) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), as in the
// CPU kernel (the sigmoid form has no 1 + tanh(u) cancellation for negative x).
constexpr float kGeluTwoSqrt2OverPi = 1.5957691216057308f;  // 2 sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu_tanh_gate(float x) {
  return sigmoid(kGeluTwoSqrt2OverPi * (x + kGeluCubic * x * x * x));
}

template <typename T>
__global__ void geglu(T* __restrict__ out, const T* __restrict__ gate, const T* __restrict__ up, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load_f32(gate, i);
    store_f32(out, i, v * gelu_tanh_gate(v) * load_f32(up, i));
  }
}

// gelu_tanh'(x) = s + x s (1 - s) 2u'(x), s = sigmoid(2u), 2u'(x) = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2).
template <typename T>
__global__ void geglu_backward(T* __restrict__ grad_gate, T* __restrict__ grad_up, const T* __restrict__ grad_out,
                               const T* __restrict__ gate, const T* __restrict__ up, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load_f32(gate, i);
    const float s = gelu_tanh_gate(v);
    const float inner_slope = kGeluTwoSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    const float d = load_f32(grad_out, i);
    store_f32(grad_up, i, d * v * s);
    store_f32(grad_gate, i, d * load_f32(up, i) * (s + v * s * (1.0f - s) * inner_slope));
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

}  // namespace

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

cudaError_t launch_scale(DType dtype, void* out, const void* a, float factor, const float* factor_in_memory, int64_t n,
                         cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    scale<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(a), factor,
                                                          factor_in_memory, n);
  });
}

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

cudaError_t launch_swiglu(DType dtype, void* out, const void* gate, const void* up, int64_t n, cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    swiglu<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(gate),
                                                           static_cast<const T*>(up), n);
  });
}

cudaError_t launch_swiglu_backward(DType dtype, void* grad_gate, void* grad_up, const void* grad_out, const void* gate,
                                   const void* up, int64_t n, cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(grad_gate), static_cast<T*>(grad_up), static_cast<const T*>(grad_out),
        static_cast<const T*>(gate), static_cast<const T*>(up), n);
  });
}

cudaError_t launch_geglu(DType dtype, void* out, const void* gate, const void* up, int64_t n, cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    geglu<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(gate),
                                                          static_cast<const T*>(up), n);
  });
}

cudaError_t launch_geglu_backward(DType dtype, void* grad_gate, void* grad_up, const void* grad_out, const void* gate,
                                  const void* up, int64_t n, cudaStream_t stream) {
  return with_float_type(dtype, n, [&](auto tag) {
    using T = decltype(tag);
    geglu_backward<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(grad_gate), static_cast<T*>(grad_up), static_cast<const T*>(grad_out),
        static_cast<const T*>(gate), static_cast<const T*>(up), n);
  });
}

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

}  // namespace titan::ops::cuda
