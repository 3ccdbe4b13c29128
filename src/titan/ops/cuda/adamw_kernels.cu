#include "titan/ops/cuda/adamw_kernels.cuh"
#include "titan/ops/cuda/device_math.cuh"

namespace titan::ops::cuda {
namespace {

constexpr int kThreads = 256;

// The CPU kernel's per-element update, term for term (all f32; sqrtf and the
// division are IEEE-rounded under nvcc's defaults): one read of p, g, m, v and
// one write of p, m, v, each rounded once to its storage dtype.
template <typename P, typename G, typename S>
__device__ void update_chunk(const AdamWTensor& t, int64_t start, int64_t count, const AdamWConstants& c) {
  P* p = static_cast<P*>(t.param) + start;
  const G* g = static_cast<const G*>(t.grad) + start;
  S* m = static_cast<S*>(t.exp_avg) + start;
  S* v = static_cast<S*>(t.exp_avg_sq) + start;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) {
    const float grad = load_f32(g, i);
    const float m_new = c.beta1 * load_f32(m, i) + c.one_minus_beta1 * grad;
    const float v_new = c.beta2 * load_f32(v, i) + c.one_minus_beta2 * grad * grad;
    const float denom = sqrtf(v_new) * c.inv_sqrt_bias2 + c.eps;
    store_f32(p, i, load_f32(p, i) * c.decay - c.step_size * m_new / denom);
    store_f32(m, i, m_new);
    store_f32(v, i, v_new);
  }
}

template <typename P, typename G>
__device__ void update_chunk_state(const AdamWTensor& t, int64_t start, int64_t count, const AdamWConstants& c) {
  if (t.state_bf16) {
    update_chunk<P, G, __nv_bfloat16>(t, start, count, c);
  } else {
    update_chunk<P, G, float>(t, start, count, c);
  }
}

template <typename P>
__device__ void update_chunk_grad(const AdamWTensor& t, int64_t start, int64_t count, const AdamWConstants& c) {
  if (t.grad_bf16) {
    update_chunk_state<P, __nv_bfloat16>(t, start, count, c);
  } else {
    update_chunk_state<P, float>(t, start, count, c);
  }
}

// One block per chunk; the dtype branches are uniform over the block.
__global__ void __launch_bounds__(kThreads)
    adamw_chunks(const AdamWTensor* tensors, int count, AdamWConstants c, const float* step_scalars) {
  if (step_scalars != nullptr) {
    c.decay = step_scalars[0];
    c.step_size = step_scalars[1];
    c.inv_sqrt_bias2 = step_scalars[2];
  }
  const AdamWTensor t = tensors[owner_of_block(tensors, count, blockIdx.x)];
  const int64_t start = (static_cast<int64_t>(blockIdx.x) - t.first_block) * kAdamWChunk;
  const int64_t rest = t.numel - start < kAdamWChunk ? t.numel - start : kAdamWChunk;
  if (t.param_bf16) {
    update_chunk_grad<__nv_bfloat16>(t, start, rest, c);
  } else {
    update_chunk_grad<float>(t, start, rest, c);
  }
}

}  // namespace

cudaError_t launch_adamw(const AdamWTensor* host_tensors, AdamWTensor* device_tensors, int count, int64_t chunks,
                         const AdamWConstants& constants, const float* step_scalars, cudaStream_t stream) {
  if (chunks == 0) return cudaSuccess;
  const cudaError_t status = upload_async(device_tensors, host_tensors, sizeof(AdamWTensor) * count, stream);
  if (status != cudaSuccess) return status;
  adamw_chunks<<<static_cast<unsigned int>(chunks), kThreads, 0, stream>>>(device_tensors, count, constants,
                                                                           step_scalars);
  return cudaGetLastError();
}

}  // namespace titan::ops::cuda
