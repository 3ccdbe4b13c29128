#include "support/gradcheck.h"

#include <cmath>

#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/generator.h"
#include "titan/nn/functional.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/random.h"

namespace titan::testing {
namespace {

double dot(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  double total = 0;
  for (size_t i = 0; i < x.size(); ++i) total += static_cast<double>(x[i]) * y[i];
  return total;
}

}  // namespace

Tensor random_leaf(const Shape& shape, uint64_t seed, double scale) {
  Generator generator(seed);
  Tensor t = Tensor::empty(shape);
  ops::normal_(t, 0.0, scale, generator);
  t.set_requires_grad(true);
  return t;
}

::testing::AssertionResult check_gradients(const DifferentiableFunction& f, const std::vector<Tensor>& inputs,
                                           const GradcheckOptions& options) {
  Generator generator(options.seed + 1000);
  std::vector<Tensor> leaves;
  for (const Tensor& input : inputs) {
    Tensor copy = input.clone();
    if (input.requires_grad()) copy.set_requires_grad(true);
    leaves.push_back(copy);
  }
  const Tensor out = f(leaves);
  Tensor weights = Tensor::empty(out.shape());
  ops::normal_(weights, 0.0, 1.0, generator);
  autograd::backward({out}, {weights.to(out.dtype())});

  for (int d = 0; d < options.directions; ++d) {
    double analytic = 0, grad_norm = 0, direction_norm = 0;
    std::vector<Tensor> plus, minus;
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!inputs[i].requires_grad()) {
        plus.push_back(inputs[i]);
        minus.push_back(inputs[i]);
        continue;
      }
      Tensor v = Tensor::empty(inputs[i].shape());
      ops::normal_(v, 0.0, 1.0, generator);
      const Tensor grad = leaves[i].grad();
      if (!grad.defined()) return ::testing::AssertionFailure() << "input " << i << " received no gradient";
      analytic += dot(grad, v);
      grad_norm += dot(grad, grad);
      direction_norm += dot(v, v);
      Tensor up = inputs[i].detach().clone(), down = inputs[i].detach().clone();
      ops::add_(up, v, static_cast<float>(options.eps));
      ops::add_(down, v, static_cast<float>(-options.eps));
      plus.push_back(up);
      minus.push_back(down);
    }
    double numeric;
    {
      autograd::NoGradGuard no_grad;
      numeric = (dot(f(plus), weights) - dot(f(minus), weights)) / (2 * options.eps);
    }
    const double bound = std::sqrt(grad_norm * direction_norm);
    if (!(std::fabs(analytic - numeric) <= options.tolerance * bound)) {
      return ::testing::AssertionFailure()
             << "direction " << d << ": analytic " << analytic << " vs numeric " << numeric << " (bound " << bound
             << ", tolerance " << options.tolerance * bound << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace titan::testing
