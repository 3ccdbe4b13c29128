// CUDA random fill: same values as the CPU for a seed (see random_kernels.cu).
// f32 and bf16 are written directly; the other float formats are drawn in f32
// and converted by the copy kernel, which is exactly the CPU's double -> f32 ->
// format rounding.
#include "titan/ops/random.h"
#include "titan/core/random_math.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/copy_kernels.cuh"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/random_kernels.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

RandomParams params_for(const RandomSpec& spec) {
  RandomParams params;
  params.a = spec.a;
  params.b = spec.b;
  params.low = spec.low;
  params.high = spec.high;
  params.seed = spec.seed;
  params.first_block = spec.first_block;
  switch (spec.distribution) {
    case Distribution::uniform:
      params.distribution = RandomDistribution::uniform;
      break;
    case Distribution::normal:
      params.distribution = RandomDistribution::normal;
      break;
    case Distribution::truncated_normal:
      params.distribution = RandomDistribution::truncated_normal;
      // The same expressions as random_value, evaluated by the same host libm.
      params.cdf_low = normal_cdf((spec.low - spec.a) / spec.b);
      params.cdf_high = normal_cdf((spec.high - spec.a) / spec.b);
      break;
  }
  return params;
}

void random_kernel(const Tensor& tensor, const RandomSpec& spec) {
  if (!is_floating(tensor.dtype())) unsupported_dtype("random", tensor.device(), tensor.dtype());
  TITAN_CHECK(tensor.is_contiguous(), "random on {}: needs a contiguous tensor (shape {})", tensor.device().str(),
              shape_str(tensor.shape()));
  const int64_t n = tensor.numel();
  if (n == 0) return;
  const RandomParams params = params_for(spec);
  const cudaStream_t stream = current_stream();
  if (tensor.dtype() == DType::f32 || tensor.dtype() == DType::bf16) {
    TITAN_CUDA_CHECK(launch_random(tensor.dtype(), tensor.data_ptr(), n, params, stream));
    return;
  }
  Tensor drawn = Tensor::empty(tensor.shape(), DType::f32, tensor.device());
  TITAN_CUDA_CHECK(launch_random(DType::f32, drawn.data_ptr(), n, params, stream));
  TITAN_CUDA_CHECK(launch_convert(tensor.data_ptr(), tensor.dtype(), drawn.data_ptr(), DType::f32, n, stream));
}

}  // namespace

void register_random() { random_kernels.set_kernel(DeviceType::cuda, random_kernel); }

}  // namespace titan::ops::cuda
