// Random fills from the counter-based Philox generator: element i of a tensor
// takes lane i % 4 of block (first + i / 4), computed in double and rounded,
// so every device and thread count produces the same values for a seed.
#pragma once

#include "titan/core/generator.h"
#include "titan/core/random_math.h"
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
  uint64_t stream = 0;  // Philox's second counter word: 0 for the run's generator, a name's hash for a parameter
  RandomBox box;        // the tensor is this box of the whole the numbers are drawn for
};

void uniform_(const Tensor& tensor, double low, double high, Generator& generator);
void normal_(const Tensor& tensor, double mean, double std, Generator& generator);
// Normal(mean, std) conditioned on [low, high], by inverse-CDF sampling.
void trunc_normal_(const Tensor& tensor, double mean, double std, double low, double high, Generator& generator);

// Fills `tensor` under an explicit spec (seed, stream, first block, box), for
// values that must not depend on a generator's position: a parameter's
// initialisation by name.
void fill_random(const Tensor& tensor, const RandomSpec& spec);

// The whole tensor's element `index` under `spec` (host reference; kernels
// compute the same, at whole_index(spec.box, i) for the tensor's element i).
double random_value(const RandomSpec& spec, uint64_t index);
// The same in two steps, for kernels that draw a block once for its four
// elements and work out the distribution's constants once per fill: the
// Philox block of whole index `index`, and the value of one of its lanes.
Philox4x32 random_block(const RandomSpec& spec, uint64_t index);
class RandomSampler {
 public:
  explicit RandomSampler(const RandomSpec& spec);
  double operator()(const Philox4x32& block, int lane) const;

 private:
  RandomSpec spec_;
  double cdf_low_ = 0.0, cdf_high_ = 0.0;  // truncated normal: the CDF at the bounds
};

using RandomKernel = void(const Tensor& tensor, const RandomSpec& spec);
inline Op<RandomKernel> random_kernels{"random"};

}  // namespace titan::ops
