#include "titan/ops/random.h"

#include "titan/core/trace_context.h"

#include <algorithm>

#include "titan/core/copy.h"
#include "titan/core/random_math.h"
#include "titan/ops/checks.h"

namespace titan::ops {

RandomSampler::RandomSampler(const RandomSpec& spec) : spec_(spec) {
  if (spec.distribution == Distribution::truncated_normal) {
    cdf_low_ = normal_cdf((spec.low - spec.a) / spec.b);
    cdf_high_ = normal_cdf((spec.high - spec.a) / spec.b);
  }
}

double RandomSampler::operator()(const Philox4x32& block, int lane) const {
  switch (spec_.distribution) {
    case Distribution::uniform:
      return spec_.a + (spec_.b - spec_.a) * philox_uniform(block.x[lane]);
    case Distribution::normal:
      return spec_.a + spec_.b * philox_normal(block, lane);
    case Distribution::truncated_normal: {
      const double p = cdf_low_ + (cdf_high_ - cdf_low_) * philox_uniform(block.x[lane]);
      return std::clamp(spec_.a + spec_.b * normal_quantile(p), spec_.low, spec_.high);
    }
  }
  return 0.0;
}

Philox4x32 random_block(const RandomSpec& spec, uint64_t index) {
  return philox4x32_10(spec.first_block + index / 4, spec.stream, spec.seed);
}

double random_value(const RandomSpec& spec, uint64_t index) {
  return RandomSampler(spec)(random_block(spec, index), static_cast<int>(index % 4));
}

void fill_random(const Tensor& tensor, const RandomSpec& spec) {
  const trace::OpScope op_scope("fill_random");
  check_defined("random", tensor, "tensor");
  TITAN_CHECK(is_floating(tensor.dtype()), "random fill of a {} tensor (shape {}): needs a floating dtype",
              dtype_name(tensor.dtype()), shape_str(tensor.shape()));
  TITAN_CHECK(
      spec.box.dims >= 0 && spec.box.dims <= kMaxRandomBoxDims && (spec.box.dims == 0 || spec.box.dims == tensor.dim()),
      "random fill: a box of {} dims for a tensor of {} (at most {})", spec.box.dims, tensor.dim(), kMaxRandomBoxDims);
  for (int d = 0; d < spec.box.dims; ++d) {
    TITAN_CHECK(spec.box.shape[d] == tensor.size(d) && spec.box.offsets[d] >= 0 &&
                    spec.box.offsets[d] + spec.box.shape[d] <= spec.box.whole[d],
                "random fill: the box's dim {} ({} at {}) does not fit the tensor ({}) in the whole ({})", d,
                spec.box.shape[d], spec.box.offsets[d], tensor.size(d), spec.box.whole[d]);
  }
  if (tensor.device().is_meta()) return;
  if (tensor.is_contiguous()) {
    random_kernels(tensor.device(), tensor, spec);
    return;
  }
  Tensor dense = Tensor::empty(tensor.shape(), tensor.dtype(), tensor.device());
  random_kernels(tensor.device(), dense, spec);
  copy_(tensor, dense);
}

namespace {

RandomSpec spec_of(Distribution distribution, double a, double b, double low = -2.0, double high = 2.0) {
  RandomSpec spec;
  spec.distribution = distribution;
  spec.a = a;
  spec.b = b;
  spec.low = low;
  spec.high = high;
  return spec;
}

// A fill that takes the generator's next blocks: consecutive fills draw fresh numbers.
void fill_from_generator(const Tensor& tensor, RandomSpec spec, Generator& generator) {
  check_defined("random", tensor, "tensor");
  spec.seed = generator.seed();
  spec.first_block = generator.reserve(static_cast<uint64_t>((tensor.numel() + 3) / 4));
  fill_random(tensor, spec);
}

}  // namespace

void uniform_(const Tensor& tensor, double low, double high, Generator& generator) {
  fill_from_generator(tensor, spec_of(Distribution::uniform, low, high), generator);
}

void normal_(const Tensor& tensor, double mean, double std, Generator& generator) {
  TITAN_CHECK(std >= 0.0, "normal_: std must be >= 0, got {}", std);
  fill_from_generator(tensor, spec_of(Distribution::normal, mean, std), generator);
}

void trunc_normal_(const Tensor& tensor, double mean, double std, double low, double high, Generator& generator) {
  TITAN_CHECK(std > 0.0 && low < high, "trunc_normal_: needs std > 0 and low < high (std {}, [{}, {}])", std, low,
              high);
  fill_from_generator(tensor, spec_of(Distribution::truncated_normal, mean, std, low, high), generator);
}

}  // namespace titan::ops
