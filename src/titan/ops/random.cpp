#include "titan/ops/random.h"

#include "titan/core/trace_context.h"

#include <algorithm>

#include "titan/core/copy.h"
#include "titan/core/random_math.h"
#include "titan/ops/checks.h"

namespace titan::ops {

double random_value(const RandomSpec& spec, uint64_t index) {
  const Philox4x32 block = philox4x32_10(spec.first_block + index / 4, 0, spec.seed);
  const int lane = static_cast<int>(index % 4);
  switch (spec.distribution) {
    case Distribution::uniform:
      return spec.a + (spec.b - spec.a) * philox_uniform(block.x[lane]);
    case Distribution::normal:
      return spec.a + spec.b * philox_normal(block, lane);
    case Distribution::truncated_normal: {
      const double lo = normal_cdf((spec.low - spec.a) / spec.b);
      const double hi = normal_cdf((spec.high - spec.a) / spec.b);
      const double p = lo + (hi - lo) * philox_uniform(block.x[lane]);
      return std::clamp(spec.a + spec.b * normal_quantile(p), spec.low, spec.high);
    }
  }
  return 0.0;
}

namespace {

void fill_random(const Tensor& tensor, RandomSpec spec, Generator& generator) {
  const trace::OpScope op_scope("fill_random");
  check_defined("random", tensor, "tensor");
  TITAN_CHECK(is_floating(tensor.dtype()), "random fill of a {} tensor (shape {}): needs a floating dtype",
              dtype_name(tensor.dtype()), shape_str(tensor.shape()));
  const auto blocks = static_cast<uint64_t>((tensor.numel() + 3) / 4);
  spec.seed = generator.seed();
  spec.first_block = generator.reserve(blocks);
  if (tensor.device().is_meta()) return;
  if (tensor.is_contiguous()) {
    random_kernels(tensor.device(), tensor, spec);
    return;
  }
  Tensor dense = Tensor::empty(tensor.shape(), tensor.dtype(), tensor.device());
  random_kernels(tensor.device(), dense, spec);
  copy_(tensor, dense);
}

}  // namespace

void uniform_(const Tensor& tensor, double low, double high, Generator& generator) {
  fill_random(tensor, RandomSpec{Distribution::uniform, low, high}, generator);
}

void normal_(const Tensor& tensor, double mean, double std, Generator& generator) {
  TITAN_CHECK(std >= 0.0, "normal_: std must be >= 0, got {}", std);
  fill_random(tensor, RandomSpec{Distribution::normal, mean, std}, generator);
}

void trunc_normal_(const Tensor& tensor, double mean, double std, double low, double high, Generator& generator) {
  TITAN_CHECK(std > 0.0 && low < high, "trunc_normal_: needs std > 0 and low < high (std {}, [{}, {}])", std, low,
              high);
  fill_random(tensor, RandomSpec{Distribution::truncated_normal, mean, std, low, high}, generator);
}

}  // namespace titan::ops
