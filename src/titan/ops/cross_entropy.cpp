#include "titan/ops/cross_entropy.h"

#include "titan/core/trace_context.h"

#include "titan/core/profiler.h"

#include "titan/ops/checks.h"

namespace titan::ops {
namespace {

void check_targets(const char* op, const Tensor& targets, int64_t rows, const Tensor& like) {
  check_defined(op, targets, "targets");
  check_dtype(op, targets, {DType::i32, DType::i64}, "targets");
  TITAN_CHECK(targets.dim() == 1 && targets.size(0) == rows, "{}: targets {} must be [{}]", op,
              shape_str(targets.shape()), rows);
  check_same_device(op, targets, like);
}

void check_options(const char* op, const CrossEntropyOptions& options) {
  TITAN_CHECK(options.softcap >= 0.0f && options.z_loss >= 0.0f, "{}: softcap and z_loss must be >= 0 (got {}, {})", op,
              options.softcap, options.z_loss);
}

}  // namespace

CrossEntropyOutput cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options) {
  const trace::OpScope op_scope("cross_entropy");
  check_defined("cross_entropy", logits, "logits");
  check_rank("cross_entropy", logits, 2, "logits [N, V]");
  check_dtype("cross_entropy", logits, {DType::f32, DType::bf16}, "logits");
  check_targets("cross_entropy", targets, logits.size(0), logits);
  check_options("cross_entropy", options);
  CrossEntropyOutput result{Tensor::empty({}, DType::f32, logits.device()),
                            Tensor::empty({logits.size(0)}, DType::f32, logits.device()), 0};
  if (!logits.device().is_meta()) {
    cross_entropy_kernels(logits.device(), result, logits.contiguous(), targets.contiguous(), options);
  }
  return result;
}

Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              int64_t counted_tokens, const CrossEntropyOptions& options) {
  const trace::OpScope op_scope("cross_entropy_backward");
  check_defined("cross_entropy_backward", grad_loss, "grad_loss");
  TITAN_CHECK(grad_loss.numel() == 1, "cross_entropy_backward: grad_loss must have one element, got {}",
              shape_str(grad_loss.shape()));
  check_defined("cross_entropy_backward", logits, "logits");
  check_rank("cross_entropy_backward", logits, 2, "logits [N, V]");
  check_targets("cross_entropy_backward", targets, logits.size(0), logits);
  // The kernel reads one lse per row: a short or non-f32 lse would be read out of bounds.
  check_defined("cross_entropy_backward", lse, "lse");
  check_dtype("cross_entropy_backward", lse, {DType::f32}, "lse");
  TITAN_CHECK(lse.dim() == 1 && lse.size(0) == logits.size(0), "cross_entropy_backward: lse {} must be [{}]",
              shape_str(lse.shape()), logits.size(0));
  Tensor grad_logits = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  if (!logits.device().is_meta()) {
    cross_entropy_backward_kernels(logits.device(), grad_logits, grad_loss.to(DType::f32).contiguous(),
                                   logits.contiguous(), targets.contiguous(), lse.contiguous(), counted_tokens,
                                   options);
  }
  return grad_logits;
}

FusedCrossEntropyOutput fused_linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                                   const FusedCrossEntropyOptions& options) {
  const trace::OpScope op_scope("fused_linear_cross_entropy");
  const char* op = "fused_linear_cross_entropy";
  check_defined(op, hidden, "hidden");
  check_defined(op, weight, "weight");
  check_rank(op, hidden, 2, "hidden [N, D]");
  check_rank(op, weight, 2, "weight [V, D]");
  TITAN_CHECK(hidden.size(1) == weight.size(1), "{}: hidden {} and weight {} differ in D", op,
              shape_str(hidden.shape()), shape_str(weight.shape()));
  check_same_dtype(op, hidden, weight);
  check_dtype(op, hidden, {DType::f32, DType::bf16}, "hidden");
  check_same_device(op, hidden, weight);
  check_targets(op, targets, hidden.size(0), hidden);
  check_options(op, options.loss);
  TITAN_CHECK(options.token_chunk > 0 && options.vocab_chunk >= 0, "{}: token_chunk must be > 0 and vocab_chunk >= 0",
              op);
  FusedCrossEntropyOutput result;
  result.loss = Tensor::empty({}, DType::f32, hidden.device());
  if (options.compute_grads) {
    result.grad_hidden = Tensor::empty(hidden.shape(), hidden.dtype(), hidden.device());
    result.grad_weight = Tensor::empty(weight.shape(), DType::f32, weight.device());
  }
  if (!hidden.device().is_meta()) {
    // The logits GEMM, and with gradients the two more that give grad_hidden and grad_weight.
    profiler::note_flops((options.compute_grads ? 6.0 : 2.0) * static_cast<double>(hidden.numel()) *
                         static_cast<double>(weight.size(0)));
    fused_cross_entropy_kernels(hidden.device(), result, hidden.contiguous(), weight.contiguous(), targets.contiguous(),
                                options);
  }
  return result;
}

}  // namespace titan::ops
