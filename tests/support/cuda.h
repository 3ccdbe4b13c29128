// Helpers for the tests that run on the CUDA backend: the CUDA cases of the op
// tests (tests/ops/<op>_test.cpp, each CUDA kernel against the CPU backend,
// itself checked against PyTorch, on the same inputs) and tests/cuda/. On a
// machine without a GPU each such test skips itself (TITAN_REQUIRE_CUDA),
// and CTest counts it skipped.
#pragma once

#include <gtest/gtest.h>

#include "support/reference.h"
#include "titan/core/copy.h"
#include "titan/core/generator.h"
#include "titan/core/tensor.h"
#include "titan/ops/random.h"

namespace titan::testing {

inline bool cuda_available() { return titan::copy_kernels.has_kernel(DeviceType::cuda); }

// Uniform values in [low, high) on the CPU, rounded to `dtype`.
inline Tensor random_cpu(const Shape& shape, DType dtype, uint64_t seed, double low = -1.0, double high = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Generator generator(seed);
  ops::uniform_(t, low, high, generator);
  return dtype == DType::f32 ? t : t.to(dtype);
}

inline Tensor on_cuda(const Tensor& cpu) { return cpu.to(Device::cuda()); }
inline Tensor on_cpu(const Tensor& t) { return t.to(Device::cpu()); }

}  // namespace titan::testing

// First line of every CUDA test.
#define TITAN_REQUIRE_CUDA() \
  if (!::titan::testing::cuda_available()) GTEST_SKIP() << "no CUDA device on this machine"
