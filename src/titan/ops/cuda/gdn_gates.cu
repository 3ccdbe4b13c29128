// CUDA Gated DeltaNet gates (ops/gdn_gates.h), the arithmetic of the CPU
// kernels (ops/cpu/kernels/gdn_gates.cpp) in f32: one thread per (row,
// token, head) element for the gates and their input gradients; one block per
// head for the A_log and dt_bias gradients, its threads striding over the
// tokens and summing in f64 in a fixed order (run-to-run identical). Every
// tensor is f32 or bf16 on its own (a flag per tensor).
#include <cuda_bf16.h>

#include <cstdint>

#include "titan/core/dtype.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/gdn_gates.h"

namespace titan::ops::cuda {
namespace gdn_gates_device {

// A tensor's data and whether it is bf16 (else f32); null data reads as zeros.
struct Slot {
  const void* data;
  bool bf16;
};
struct OutSlot {
  void* data;
  bool bf16;
};

Slot slot(const Tensor& t) { return {t.defined() ? t.data_ptr() : nullptr, t.defined() && t.dtype() == DType::bf16}; }
OutSlot out_slot(const Tensor& t) { return {t.data_ptr(), t.dtype() == DType::bf16}; }

__device__ __forceinline__ float read(Slot s, int64_t i) {
  if (s.data == nullptr) return 0.0f;
  return s.bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(s.data)[i]) : static_cast<const float*>(s.data)[i];
}
__device__ __forceinline__ void write(OutSlot s, int64_t i, float v) {
  if (s.bf16)
    static_cast<__nv_bfloat16*>(s.data)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(s.data)[i] = v;
}
// PyTorch's softplus (threshold 20).
__device__ __forceinline__ float softplus(float u) { return u > 20.0f ? u : log1pf(expf(u)); }
__device__ __forceinline__ float logistic(float u) { return 1.0f / (1.0f + expf(-u)); }

__global__ void gates_forward(Slot a, Slot b, Slot a_log, Slot dt_bias, int64_t n, int64_t heads, float* g,
                              float* beta) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t h = i % heads;
    g[i] = -expf(read(a_log, h)) * softplus(read(a, i) + read(dt_bias, h));
    beta[i] = logistic(read(b, i));
  }
}

__global__ void gates_backward(Slot grad_g, Slot grad_beta, Slot a, Slot b, Slot a_log, Slot dt_bias, int64_t n,
                               int64_t heads, OutSlot grad_a, OutSlot grad_b) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t h = i % heads;
    const float u = read(a, i) + read(dt_bias, h);
    write(grad_a, i, -expf(read(a_log, h)) * (u > 20.0f ? 1.0f : logistic(u)) * read(grad_g, i));
    const float s = logistic(read(b, i));
    write(grad_b, i, read(grad_beta, i) * s * (1.0f - s));
  }
}

// One block per head h: d dt_bias = sum of d(a + dt_bias), d A_log = sum of -exp(A_log) softplus(u) dg.
__global__ void gates_head_grads(Slot grad_g, Slot a, Slot a_log, Slot dt_bias, int64_t n, int64_t heads,
                                 OutSlot grad_a_log, OutSlot grad_dt_bias) {
  __shared__ double scratch[32];
  const int64_t h = blockIdx.x;
  const float decay = expf(read(a_log, h)), bias = read(dt_bias, h);
  double sum_dt = 0.0, sum_log = 0.0;
  for (int64_t i = h + threadIdx.x * heads; i < n; i += static_cast<int64_t>(blockDim.x) * heads) {
    const float u = read(a, i) + bias, dg = read(grad_g, i);
    sum_dt += static_cast<double>(-decay * (u > 20.0f ? 1.0f : logistic(u)) * dg);
    sum_log += static_cast<double>(-decay * softplus(u) * dg);
  }
  sum_dt = block_sum(sum_dt, scratch);  // block_sum syncs before it reuses scratch
  sum_log = block_sum(sum_log, scratch);
  if (threadIdx.x == 0) {
    write(grad_dt_bias, h, static_cast<float>(sum_dt));
    write(grad_a_log, h, static_cast<float>(sum_log));
  }
}

void gdn_gates_kernel(const GdnGates& out, const GdnGateInputs& in) {
  const int64_t n = in.a.numel(), heads = in.a.size(2);
  gates_forward<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      slot(in.a), slot(in.b), slot(in.a_log), slot(in.dt_bias), n, heads, out.g.data<float>(), out.beta.data<float>());
  TITAN_CUDA_CHECK(cudaGetLastError());
}

void gdn_gates_backward_kernel(const GdnGateGrads& grads, const Tensor& grad_g, const Tensor& grad_beta,
                               const GdnGateInputs& in) {
  const int64_t n = in.a.numel(), heads = in.a.size(2);
  cudaStream_t stream = current_stream();
  if (n > 0) {
    gates_backward<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        slot(grad_g), slot(grad_beta), slot(in.a), slot(in.b), slot(in.a_log), slot(in.dt_bias), n, heads,
        out_slot(grads.grad_a), out_slot(grads.grad_b));
    TITAN_CUDA_CHECK(cudaGetLastError());
  }
  if (heads > 0) {
    gates_head_grads<<<static_cast<unsigned>(heads), kThreads, 0, stream>>>(
        slot(grad_g), slot(in.a), slot(in.a_log), slot(in.dt_bias), n, heads, out_slot(grads.grad_a_log),
        out_slot(grads.grad_dt_bias));
    TITAN_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace gdn_gates_device

void register_gdn_gates() {
  gdn_gates_kernels.set_kernel(DeviceType::cuda, gdn_gates_device::gdn_gates_kernel);
  gdn_gates_backward_kernels.set_kernel(DeviceType::cuda, gdn_gates_device::gdn_gates_backward_kernel);
}

}  // namespace titan::ops::cuda
