// Autograd functions of the cross-entropy ops (ops/cross_entropy.h): plain
// cross-entropy over materialised logits, and the fused linear cross-entropy
// whose gradients come out of its forward pass.
#include "titan/autograd/function_node.h"
#include "titan/core/copy.h"
#include "titan/nn/functional.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/grad_clip.h"

namespace titan::F {

using autograd::record;

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const ops::CrossEntropyOptions& options) {
  ops::CrossEntropyOutput out = ops::cross_entropy(logits, targets, options);
  const Tensor saved_logits = logits.detach(), saved_targets = targets.detach(), lse = out.lse;
  const int64_t counted = out.counted_tokens;
  record("CrossEntropyBackward", {&logits}, {&out.loss}, [=](const auto& g) {
    return std::vector<Tensor>{ops::cross_entropy_backward(g[0], saved_logits, saved_targets, lse, counted, options)};
  });
  return out.loss;
}

Tensor fused_linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                  const ops::FusedCrossEntropyOptions& options) {
  ops::FusedCrossEntropyOptions run = options;
  run.compute_grads = autograd::grad_enabled() && (hidden.requires_grad() || weight.requires_grad());
  ops::FusedCrossEntropyOutput out = ops::fused_linear_cross_entropy(hidden, weight, targets, run);
  const Tensor grad_hidden = out.grad_hidden, grad_weight = out.grad_weight;
  record("FusedLinearCrossEntropyBackward", {&hidden, &weight}, {&out.loss}, [=](const auto& g) {
    // The forward produced d(loss)/d(input) for a unit loss gradient; scale by the real one.
    // The weight gradient stays f32 even for a bf16 weight: it usually flows on to an f32
    // master weight, and rounding it to bf16 first would only lose precision (and memory).
    // The factor stays on the device (a host read would stall the step and
    // break graph capture); scaling by 1 is exact.
    const Tensor factor = titan::cast(g[0], DType::f32).reshape({1});
    return std::vector<Tensor>{ops::scaled_by(grad_hidden, factor, 0), ops::scaled_by(grad_weight, factor, 0)};
  });
  return out.loss;
}

}  // namespace titan::F
