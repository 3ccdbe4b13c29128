// Finite-difference gradient checks for functions with no PyTorch twin (or
// as a second, independent check): the analytic directional derivative
// <grad L, v> against the central difference (L(x + eps v) - L(x - eps v)) / 2 eps
// for L = <f(x), r> with random r and random directions v.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::testing {

using DifferentiableFunction = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  int directions = 3;
  double eps = 1e-2;
  // Allowed |analytic - numeric| relative to ||grad|| * ||v|| (the largest
  // the directional derivative can be). In f32 with eps = 1e-2 on O(1)
  // inputs, truncation (eps^2) and rounding (2^-24 / eps) errors stay near
  // 1e-4 of that bound; a wrong or missing gradient term is O(1).
  double tolerance = 2e-3;
  uint64_t seed = 0;
};

// `inputs` are f32 tensors; those that require grad are checked.
::testing::AssertionResult check_gradients(const DifferentiableFunction& f, const std::vector<Tensor>& inputs,
                                           const GradcheckOptions& options = {});

// A random f32 leaf requiring grad, N(0, scale).
Tensor random_leaf(const Shape& shape, uint64_t seed, double scale = 1.0);

}  // namespace titan::testing
