// The autograd function of the gated delta rule (ops/delta_rule.h). Backward
// runs the op's own backward (the chunked one recomputes the chunk-boundary
// states), so nothing beyond the inputs is saved.
#include "titan/ops/delta_rule.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"

namespace titan::F {

using autograd::record;

GatedDeltaRuleResult gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                      const Tensor& beta, const Tensor& initial_state,
                                      const ops::DeltaRuleOptions& options) {
  ops::DeltaRuleOutput out = ops::gated_delta_rule(q, k, v, g, beta, initial_state, options);
  const Tensor sq = q.detach(), sk = k.detach(), sv = v.detach(), sg = g.detach(), sbeta = beta.detach();
  const Tensor sstate = initial_state.defined() ? initial_state.detach() : Tensor();
  record("GatedDeltaRuleBackward", {&q, &k, &v, &g, &beta, &initial_state}, {&out.out, &out.final_state},
         [=](const auto& grads) {
           // No gradient reached the output when only the final state is used.
           const Tensor grad_out = grads[0].defined() ? grads[0] : Tensor::zeros(sv.shape(), sq.dtype(), sq.device());
           ops::DeltaRuleGrads d =
               ops::gated_delta_rule_backward(grad_out, grads[1], sq, sk, sv, sg, sbeta, sstate, options);
           return std::vector<Tensor>{d.grad_q, d.grad_k, d.grad_v, d.grad_g, d.grad_beta, d.grad_initial_state};
         });
  return {out.out, out.final_state};
}

GatedDeltaRuleResult gated_delta_rule_step(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                           const Tensor& beta, const Tensor& state, ops::DeltaRuleOptions options) {
  options.algorithm = ops::DeltaRuleAlgorithm::recurrent;
  return F::gated_delta_rule(q, k, v, g, beta, state, options);
}

}  // namespace titan::F
