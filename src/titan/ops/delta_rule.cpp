#include "titan/ops/delta_rule.h"

#include <cmath>

#include "titan/core/trace_context.h"

#include "titan/ops/checks.h"

namespace titan::ops {
namespace delta_rule_checks {

// Checks shapes, dtypes and devices; returns the options with scale resolved.
DeltaRuleOptions checked_options(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                 const Tensor& beta, const Tensor& initial_state, const DeltaRuleOptions& options) {
  check_defined(op, q, "q");
  check_defined(op, k, "k");
  check_defined(op, v, "v");
  check_defined(op, g, "g");
  check_defined(op, beta, "beta");
  check_rank(op, q, 4, "q [B, T, Hk, Dk]");
  check_rank(op, v, 4, "v [B, T, Hv, Dv]");
  check_same_shape(op, q, k);
  check_dtype(op, q, {DType::f32, DType::bf16}, "q");
  check_same_dtype(op, q, k);
  check_same_dtype(op, q, v);
  const int64_t batch = q.size(0), tokens = q.size(1), key_heads = q.size(2), value_heads = v.size(2);
  TITAN_CHECK(v.size(0) == batch && v.size(1) == tokens, "{}: v {} and q {} differ in batch or tokens", op,
              shape_str(v.shape()), shape_str(q.shape()));
  TITAN_CHECK(key_heads > 0 && value_heads % key_heads == 0,
              "{}: value heads ({}) must be a multiple of key heads ({})", op, value_heads, key_heads);
  TITAN_CHECK(q.size(3) > 0 && v.size(3) > 0, "{}: empty head dims (q {}, v {})", op, shape_str(q.shape()),
              shape_str(v.shape()));
  const Shape gate_shape{batch, tokens, value_heads};
  for (const auto& [tensor, name] : {std::pair{&g, "g"}, std::pair{&beta, "beta"}}) {
    TITAN_CHECK(tensor->shape() == gate_shape, "{}: {} is {}, expected [B, T, Hv] = {}", op, name,
                shape_str(tensor->shape()), shape_str(gate_shape));
    TITAN_CHECK(tensor->dtype() == DType::f32 || tensor->dtype() == q.dtype(),
                "{}: {} has dtype {}, expected f32 or {}", op, name, dtype_name(tensor->dtype()),
                dtype_name(q.dtype()));
    check_same_device(op, q, *tensor);
  }
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  if (initial_state.defined()) {
    const Shape state_shape{batch, value_heads, q.size(3), v.size(3)};
    TITAN_CHECK(initial_state.shape() == state_shape, "{}: initial_state is {}, expected [B, Hv, Dk, Dv] = {}", op,
                shape_str(initial_state.shape()), shape_str(state_shape));
    check_dtype(op, initial_state, {DType::f32}, "initial_state");
    check_same_device(op, q, initial_state);
  }
  if (options.document_ids.defined()) {
    const Tensor& ids = options.document_ids;
    TITAN_CHECK(ids.shape() == (Shape{batch, tokens}), "{}: document_ids is {}, expected [B, T] = [{}, {}]", op,
                shape_str(ids.shape()), batch, tokens);
    check_dtype(op, ids, {DType::i32, DType::i64}, "document_ids");
    check_same_device(op, q, ids);
  }
  TITAN_CHECK(options.chunk_size >= 1 && options.chunk_size <= 256, "{}: chunk_size must be in [1, 256], got {}", op,
              options.chunk_size);
  DeltaRuleOptions resolved = options;
  if (!resolved.scale) resolved.scale = 1.0f / std::sqrt(static_cast<float>(q.size(3)));
  if (resolved.document_ids.defined()) resolved.document_ids = resolved.document_ids.contiguous();
  return resolved;
}

DeltaRuleInputs contiguous_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                  const Tensor& beta, const Tensor& initial_state) {
  return {q.contiguous(), k.contiguous(),    v.contiguous(),
          g.contiguous(), beta.contiguous(), initial_state.defined() ? initial_state.contiguous() : Tensor()};
}

}  // namespace delta_rule_checks

DeltaRuleOutput gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                                 const Tensor& initial_state, const DeltaRuleOptions& options) {
  const trace::OpScope op_scope("gated_delta_rule");
  const DeltaRuleOptions resolved =
      delta_rule_checks::checked_options("gated_delta_rule", q, k, v, g, beta, initial_state, options);
  const int64_t batch = q.size(0), tokens = q.size(1), value_heads = v.size(2);
  DeltaRuleOutput result{Tensor::empty({batch, tokens, value_heads, v.size(3)}, q.dtype(), q.device()),
                         Tensor::empty({batch, value_heads, q.size(3), v.size(3)}, DType::f32, q.device())};
  if (!q.device().is_meta()) {
    delta_rule_kernels(q.device(), result, delta_rule_checks::contiguous_inputs(q, k, v, g, beta, initial_state),
                       resolved);
  }
  return result;
}

DeltaRuleGrads gated_delta_rule_backward(const Tensor& grad_out, const Tensor& grad_final_state, const Tensor& q,
                                         const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                                         const Tensor& initial_state, const DeltaRuleOptions& options) {
  const char* op = "gated_delta_rule_backward";
  const trace::OpScope op_scope(op);
  const DeltaRuleOptions resolved = delta_rule_checks::checked_options(op, q, k, v, g, beta, initial_state, options);
  check_defined(op, grad_out, "grad_out");
  const Shape out_shape{q.size(0), q.size(1), v.size(2), v.size(3)};
  TITAN_CHECK(grad_out.shape() == out_shape, "{}: grad_out is {}, expected {}", op, shape_str(grad_out.shape()),
              shape_str(out_shape));
  check_same_dtype(op, grad_out, q);
  if (grad_final_state.defined()) {
    const Shape state_shape{q.size(0), v.size(2), q.size(3), v.size(3)};
    TITAN_CHECK(grad_final_state.shape() == state_shape, "{}: grad_final_state is {}, expected {}", op,
                shape_str(grad_final_state.shape()), shape_str(state_shape));
    check_dtype(op, grad_final_state, {DType::f32}, "grad_final_state");
  }
  DeltaRuleGrads grads{
      Tensor::empty(q.shape(), q.dtype(), q.device()),
      Tensor::empty(k.shape(), k.dtype(), k.device()),
      Tensor::empty(v.shape(), v.dtype(), v.device()),
      Tensor::empty(g.shape(), g.dtype(), g.device()),
      Tensor::empty(beta.shape(), beta.dtype(), beta.device()),
      initial_state.defined() ? Tensor::empty(initial_state.shape(), DType::f32, q.device()) : Tensor()};
  if (!q.device().is_meta()) {
    delta_rule_backward_kernels(q.device(), grads, grad_out.contiguous(),
                                grad_final_state.defined() ? grad_final_state.contiguous() : Tensor(),
                                delta_rule_checks::contiguous_inputs(q, k, v, g, beta, initial_state), resolved);
  }
  return grads;
}

}  // namespace titan::ops
