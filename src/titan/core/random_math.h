// Distribution math shared by every random kernel (host and device): element
// index -> Philox lane -> value. Computed in double so that devices with
// different libm rounding still agree after the final rounding to f32.
#pragma once

#include <cmath>
#include <cstdint>

#include "titan/core/philox.h"

namespace titan {

// Inverse of the standard normal CDF: Acklam's rational approximation
// (relative error 1.2e-9) refined by one Halley step to near double precision.
TITAN_HOST_DEVICE double normal_quantile(double p) {
  constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                          1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
                          -1.328068155288572e+01};
  constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                          -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double p_low = 0.02425;
  double x;
  if (p < p_low) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else if (p <= 1.0 - p_low) {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  } else {
    const double q = std::sqrt(-2.0 * std::log(1.0 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  }
  const double error = 0.5 * std::erfc(-x / 1.4142135623730951) - p;
  const double u = error * 2.5066282746310002 * std::exp(0.5 * x * x);
  return x - u / (1.0 + 0.5 * x * u);
}

TITAN_HOST_DEVICE double normal_cdf(double x) { return 0.5 * std::erfc(-x / 1.4142135623730951); }

// Box-Muller on lanes (0, 1) and (2, 3) of one Philox block: lane 2k takes the
// cosine branch, lane 2k + 1 the sine branch of the same pair.
TITAN_HOST_DEVICE double philox_normal(const Philox4x32& block, int lane) {
  const int pair = lane & ~1;
  const double radius = std::sqrt(-2.0 * std::log(philox_uniform(block.x[pair])));
  const double angle = 6.283185307179586 * philox_uniform(block.x[pair + 1]);
  return (lane & 1) ? radius * std::sin(angle) : radius * std::cos(angle);
}

// A tensor that is a box of a larger one (a parameter's shard): its element i
// is the whole tensor's element whole_index(box, i). Random fills key on that
// index, so a shard draws exactly the numbers the whole tensor holds there,
// whatever the mesh that cut it.
inline constexpr int kMaxRandomBoxDims = 4;
struct RandomBox {
  int dims = 0;  // 0: the tensor is the whole
  int64_t shape[kMaxRandomBoxDims] = {};
  int64_t whole[kMaxRandomBoxDims] = {};
  int64_t offsets[kMaxRandomBoxDims] = {};
};

TITAN_HOST_DEVICE uint64_t whole_index(const RandomBox& box, uint64_t i) {
  uint64_t index = 0, stride = 1;
  for (int d = box.dims - 1; d >= 0; --d) {
    const auto extent = static_cast<uint64_t>(box.shape[d]);
    index += (i % extent + static_cast<uint64_t>(box.offsets[d])) * stride;
    i /= extent;
    stride *= static_cast<uint64_t>(box.whole[d]);
  }
  return box.dims == 0 ? i : index;
}

}  // namespace titan
