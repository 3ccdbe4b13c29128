// CPU group norm (ops/group_norm.h), forward only. One task per (sample,
// group), which reads its elements in order: the statistics, summed in f64,
// do not depend on the thread count. Two passes (mean, then the squared
// deviations) rather than sum and sum of squares, which cancel when the mean
// is large against the spread.
#include <cmath>
#include <vector>

#include "titan/ops/group_norm.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

std::vector<float> group_norm_affine_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  dispatch_float("group_norm", t.dtype(), [&](auto tag) {
    using W = decltype(tag);
    const W* src = t.data<W>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = to_f32(src[i]);
  });
  return out;
}

void group_norm_kernel(const Tensor& y, const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                       float eps) {
  const int64_t batch = x.size(0), channels = x.size(1), per_group = channels / groups;
  const int64_t positions = x.numel() / (batch * channels), group_size = per_group * positions;
  const std::vector<float> w = group_norm_affine_f32(weight), b = group_norm_affine_f32(bias);
  dispatch_float("group_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    parallel_for(batch * groups, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const T* src = x.data<T>() + task * group_size;
        T* dst = y.data<T>() + task * group_size;
        double sum = 0.0;
        for (int64_t i = 0; i < group_size; ++i) sum += to_f32(src[i]);
        const double mean = sum / static_cast<double>(group_size);
        double squares = 0.0;
        for (int64_t i = 0; i < group_size; ++i) {
          const double d = to_f32(src[i]) - mean;
          squares += d * d;
        }
        const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(group_size) + eps);
        const int64_t first_channel = (task % groups) * per_group;
        for (int64_t c = 0; c < per_group; ++c) {
          const float scale = static_cast<float>(rstd * w[first_channel + c]), shift = b[first_channel + c];
          const float mean_f = static_cast<float>(mean);
          const T* in = src + c * positions;
          T* out = dst + c * positions;
          for (int64_t s = 0; s < positions; ++s) out[s] = from_f32<T>((to_f32(in[s]) - mean_f) * scale + shift);
        }
      }
    });
  });
}

}  // namespace

void register_group_norm() { group_norm_kernels.set_kernel(DeviceType::cpu, group_norm_kernel); }

}  // namespace titan::ops::cpu::TITAN_ISA
