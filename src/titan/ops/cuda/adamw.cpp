// CUDA multi-tensor fused AdamW: every tensor's chunks in one launch (see
// adamw_kernels.cuh), with the CPU kernel's formulas and dtype rules.
#include <cmath>
#include <limits>
#include <vector>

#include "titan/ops/adamw.h"
#include "titan/ops/cuda/adamw_kernels.cuh"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

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
