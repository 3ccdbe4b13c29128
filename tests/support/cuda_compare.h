// Comparisons of a CUDA result with the CPU backend's on the same inputs:
// bitwise, or element by element within bounds derived from u = 2^-24 (the
// f32 unit roundoff). A sum of n rounded products is within n*u*S of exact,
// S = sum of |products|, on either backend whatever its order or its use of
// FMA, so the backends differ by at most 2*n*u*S; any wrong term is orders of
// magnitude bigger. A bf16 result adds one bf16 ulp (at most 2^-7 of its
// magnitude) when the two f32 values straddle a rounding boundary.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "support/cuda.h"
#include "titan/core/tensor.h"

namespace titan::testing {

inline constexpr double kUnit = 0x1p-24;     // f32 unit roundoff
inline constexpr double kBf16Step = 0x1p-7;  // one bf16 ulp, relative to the magnitude

// Identical dtype, shape and bits (a CUDA result against the CPU's).
inline ::testing::AssertionResult same_bits(const Tensor& cuda_result, const Tensor& cpu_result) {
  if (!cuda_result.device().is_cuda()) return ::testing::AssertionFailure() << "the result is not on the GPU";
  const Tensor actual = on_cpu(cuda_result).contiguous(), expected = cpu_result.contiguous();
  if (actual.dtype() != expected.dtype() || actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << dtype_name(actual.dtype()) << " " << shape_str(actual.shape()) << " vs "
                                         << dtype_name(expected.dtype()) << " " << shape_str(expected.shape());
  }
  if (actual.numel() == 0) return ::testing::AssertionSuccess();
  const size_t size = actual.element_size();
  const auto* a = static_cast<const unsigned char*>(actual.data_ptr());
  const auto* e = static_cast<const unsigned char*>(expected.data_ptr());
  int64_t differing = 0, first = -1;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    if (std::memcmp(a + static_cast<size_t>(i) * size, e + static_cast<size_t>(i) * size, size) != 0) {
      if (first < 0) first = i;
      ++differing;
    }
  }
  if (differing == 0) return ::testing::AssertionSuccess();
  const bool ints = actual.dtype() == DType::i64 || actual.dtype() == DType::i32;
  const auto at = static_cast<size_t>(first);
  auto failure = ::testing::AssertionFailure();
  failure << differing << " of " << actual.numel() << " elements differ; first at flat index " << first << ": ";
  if (ints) return failure << actual.to_ints()[at] << " vs " << expected.to_ints()[at];
  return failure << actual.to_floats()[at] << " vs " << expected.to_floats()[at];
}

// |actual - expected| <= bound elementwise (NaN fails).
inline ::testing::AssertionResult within(const Tensor& cuda_result, const Tensor& cpu_result,
                                         const std::vector<double>& bound) {
  if (!cuda_result.device().is_cuda()) return ::testing::AssertionFailure() << "the result is not on the GPU";
  if (cuda_result.dtype() != cpu_result.dtype() || cuda_result.shape() != cpu_result.shape()) {
    return ::testing::AssertionFailure() << "dtype or shape differs";
  }
  const std::vector<float> a = on_cpu(cuda_result).to_floats(), e = cpu_result.to_floats();
  int64_t failures = 0;
  size_t worst = 0;
  double worst_ratio = -1.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double error = std::fabs(static_cast<double>(a[i]) - e[i]);
    if (!(error <= bound[i])) ++failures;
    const double ratio = std::isnan(error) ? 1e300 : error / std::max(bound[i], 1e-300);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures << " of " << a.size() << " elements exceed their bound; worst at "
                                       << worst << ": " << a[worst] << " vs " << e[worst] << " (bound " << bound[worst]
                                       << ")";
}

// The bound of a bf16 result: the f32 bound plus one bf16 step of the value.
inline void add_bf16_step(std::vector<double>& bound, const Tensor& expected) {
  if (expected.dtype() != DType::bf16) return;
  const std::vector<float> e = expected.to_floats();
  for (size_t i = 0; i < bound.size(); ++i) bound[i] += kBf16Step * std::fabs(e[i]);
}

}  // namespace titan::testing
