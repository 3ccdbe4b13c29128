// A float8 recipe's Linear with fp8 tensor cores on against off (the
// emulation): what the CUDA float8 tests check after each tensor-core GEMM.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "support/cuda.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/nn/float8_recipe.h"
#include "titan/nn/functional.h"

namespace titan::testing {

// x [M, in], w [out, in] and gy [M, out] on the GPU: the output and both
// gradients agree within `tol` relative to each one's largest value.
inline void expect_tensor_cores_match_emulation(const std::string& recipe_name, const Tensor& x, const Tensor& w,
                                                const Tensor& gy, double tol) {
  SCOPED_TRACE(recipe_name);
  nn::Float8LinearRecipe emulate = nn::float8_linear_recipe(recipe_name), cores = emulate;
  emulate.tensor_cores = false;
  cores.tensor_cores = true;
  Tensor x1 = x.detach(), w1 = w.detach(), x2 = x.detach(), w2 = w.detach();
  for (Tensor* t : {&x1, &w1, &x2, &w2}) t->set_requires_grad(true);
  const Tensor y1 = F::float8_linear(x1, w1, Tensor(), emulate), y2 = F::float8_linear(x2, w2, Tensor(), cores);
  autograd::backward({y1}, {gy});
  autograd::backward({y2}, {gy});
  for (const auto& [expected, actual] :
       std::vector<std::pair<Tensor, Tensor>>{{y1, y2}, {x1.grad(), x2.grad()}, {w1.grad(), w2.grad()}}) {
    const Tensor on_host = on_cpu(expected);
    EXPECT_TRUE(all_close(on_cpu(actual), on_host, tol * max_abs(on_host), tol));
  }
}

}  // namespace titan::testing
