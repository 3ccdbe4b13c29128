// CUDA multi-tensor fused AdamW, with the CPU kernel's formulas and dtype
// rules: kernel, launcher, Tensor plumbing and registration.
//
// Every tensor is cut into chunks of kAdamWChunk elements; one launch runs one
// block per chunk of every tensor, each block finding its tensor in a device
// array of AdamWTensor (so thousands of small tensors cost one launch, and a
// few large ones still spread over the whole GPU).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "titan/ops/adamw.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

constexpr int64_t kAdamWChunk = 16384;
inline int64_t adamw_chunks(int64_t n) { return (n + kAdamWChunk - 1) / kAdamWChunk; }

// One non-empty tensor: its chunks are [first_block, first_block + adamw_chunks(numel)).
struct AdamWTensor {
  void* param;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  int64_t numel;
  int64_t first_block;
  int32_t param_bf16;
  int32_t grad_bf16;
  int32_t state_bf16;  // both moments
};

// The per-step constants, derived on the host as the CPU kernel derives them.
struct AdamWConstants {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float eps;
  float decay;           // 1 - lr * weight_decay
  float step_size;       // lr / (1 - beta1^step)
  float inv_sqrt_bias2;  // 1 / sqrt(1 - beta2^step)
};

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

// `host_tensors` (count entries, ordered by first_block) is uploaded into
// `device_tensors`; `chunks` is the total. `step_scalars` (device memory,
// may be null) overrides decay, step_size and inv_sqrt_bias2, in that order.
cudaError_t launch_adamw(const AdamWTensor* host_tensors, AdamWTensor* device_tensors, int count, int64_t chunks,
                         const AdamWConstants& constants, const float* step_scalars, cudaStream_t stream) {
  if (chunks == 0) return cudaSuccess;
  const cudaError_t status = upload_async(device_tensors, host_tensors, sizeof(AdamWTensor) * count, stream);
  if (status != cudaSuccess) return status;
  adamw_chunks<<<static_cast<unsigned int>(chunks), kThreads, 0, stream>>>(device_tensors, count, constants,
                                                                           step_scalars);
  return cudaGetLastError();
}

// f32 or bf16 (1), else the op's unsupported-dtype error.
int32_t bf16_flag(const Tensor& t) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16) unsupported_dtype("adamw", t.device(), t.dtype());
  return t.dtype() == DType::bf16 ? 1 : 0;
}

// The step scalars come from adamw_step_scalars, as on the CPU, so both apply the same f32 constants.
AdamWConstants constants_for(const AdamWHyper& hyper) {
  const AdamWStepScalars scalars = adamw_step_scalars(hyper);
  AdamWConstants c{};
  c.beta1 = hyper.beta1;
  c.one_minus_beta1 = 1.0f - hyper.beta1;
  c.beta2 = hyper.beta2;
  c.one_minus_beta2 = 1.0f - hyper.beta2;
  c.eps = hyper.eps;
  c.decay = scalars.decay;
  c.step_size = scalars.step_size;
  c.inv_sqrt_bias2 = scalars.inv_sqrt_bias2;
  return c;
}

void adamw_kernel(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avg,
                  std::span<const Tensor> exp_avg_sq, const AdamWHyper& hyper) {
  std::vector<AdamWTensor> host;
  host.reserve(params.size());
  int64_t chunks = 0;
  for (size_t t = 0; t < params.size(); ++t) {
    const int32_t param_bf16 = bf16_flag(params[t]), grad_bf16 = bf16_flag(grads[t]);
    const int32_t state_bf16 = bf16_flag(exp_avg[t]);
    TITAN_CHECK(exp_avg[t].dtype() == exp_avg_sq[t].dtype(), "adamw: moments of tensor {} differ in dtype", t);
    const int64_t n = params[t].numel();
    if (n == 0) continue;  // no chunks: kept out of the chunk -> tensor search
    host.push_back({params[t].data_ptr(), grads[t].data_ptr(), exp_avg[t].data_ptr(), exp_avg_sq[t].data_ptr(), n,
                    chunks, param_bf16, grad_bf16, state_bf16});
    chunks += adamw_chunks(n);
  }
  TITAN_CHECK(chunks < std::numeric_limits<int32_t>::max(), "adamw on {}: {} chunks are too many for one CUDA grid",
              params.front().device().str(), chunks);
  const Tensor device =
      Tensor::empty({static_cast<int64_t>(host.size() * sizeof(AdamWTensor))}, DType::u8, params.front().device());
  TITAN_CUDA_CHECK(launch_adamw(host.data(), static_cast<AdamWTensor*>(device.data_ptr()),
                                static_cast<int>(host.size()), chunks, constants_for(hyper),
                                hyper.step_scalars.defined() ? hyper.step_scalars.data<float>() : nullptr,
                                current_stream()));
}

}  // namespace

void register_adamw() { adamw_kernels.set_kernel(DeviceType::cuda, adamw_kernel); }

}  // namespace titan::ops::cuda
