// Random fills from the counter-based Philox generator: element i of a tensor
// takes lane i % 4 of block (first + i / 4), computed in double and rounded,
// so every device and thread count produces the same values for a seed.
#pragma once

#include "titan/core/generator.h"
#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

enum class Distribution { uniform, normal, truncated_normal };

struct RandomSpec {
  Distribution distribution = Distribution::uniform;
  double a = 0.0;                 // uniform: low;   normal: mean; truncated: mean
  double b = 1.0;                 // uniform: high;  normal: std;  truncated: std
  double low = -2.0, high = 2.0;  // truncated: absolute bounds (as torch.nn.init.trunc_normal_)
  uint64_t seed = 0;
  uint64_t first_block = 0;
};

void uniform_(const Tensor& tensor, double low, double high, Generator& generator);
void normal_(const Tensor& tensor, double mean, double std, Generator& generator);
// Normal(mean, std) conditioned on [low, high], by inverse-CDF sampling.
void trunc_normal_(const Tensor& tensor, double mean, double std, double low, double high, Generator& generator);

// Element i's value under `spec` (host reference; kernels compute the same).
double random_value(const RandomSpec& spec, uint64_t index);

using RandomKernel = void(const Tensor& tensor, const RandomSpec& spec);
inline Op<RandomKernel> random_kernels{"random"};

}  // namespace titan::ops
