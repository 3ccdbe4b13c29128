// Launcher for the CUDA random fill: the same Philox numbers and distribution
// math as the CPU (ops/random.cpp's random_value), one thread per Philox block.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "titan/core/dtype.h"

namespace titan::ops::cuda {

enum class RandomDistribution { uniform, normal, truncated_normal };

struct RandomParams {
  RandomDistribution distribution = RandomDistribution::uniform;
  double a = 0.0, b = 1.0;               // uniform: [a, b); normal and truncated: mean a, std b
  double low = 0.0, high = 0.0;          // truncated: the bounds
  double cdf_low = 0.0, cdf_high = 0.0;  // truncated: normal_cdf((low - a) / b), ((high - a) / b), from the host
  uint64_t seed = 0;
  uint64_t first_block = 0;
};

// Fills n contiguous elements of `dtype` (f32 or bf16): element i takes lane
// i % 4 of Philox block first_block + i / 4, rounded once from double.
cudaError_t launch_random(DType dtype, void* out, int64_t n, const RandomParams& params, cudaStream_t stream);

}  // namespace titan::ops::cuda
