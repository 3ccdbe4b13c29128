#include "titan/ops/moe_routing.h"

#include "titan/core/trace_context.h"

#include "titan/ops/checks.h"

namespace titan::ops {
namespace {

void check_flat_pairs(const char* op, const Tensor& pairs, int64_t tokens, int64_t k, const char* what) {
  check_dtype(op, pairs, {DType::i64}, what);
  TITAN_CHECK(pairs.dim() == 1 && pairs.size(0) == tokens * k, "{}: {} must be [T*k] = [{}], got {}", op, what,
              tokens * k, shape_str(pairs.shape()));
}

}  // namespace

TopK topk(const Tensor& scores, int64_t k) {
  const trace::OpScope op_scope("topk");
  check_defined("topk", scores, "scores");
  check_rank("topk", scores, 2, "scores");
  check_dtype("topk", scores, {DType::f32}, "scores");
  TITAN_CHECK(k >= 1 && k <= scores.size(1), "topk: k = {} must be in [1, {}] (the row length)", k, scores.size(1));
  TopK out{Tensor::empty({scores.size(0), k}, DType::f32, scores.device()),
           Tensor::empty({scores.size(0), k}, DType::i64, scores.device())};
  if (has_work(out.values)) topk_kernels(scores.device(), out.values, out.indices, scores.contiguous());
  return out;
}

Tensor limit_to_groups(const Tensor& choice, int64_t groups, int64_t kept) {
  const char* op = "limit_to_groups";
  const trace::OpScope op_scope(op);
  check_defined(op, choice, "choice");
  check_rank(op, choice, 2, "choice");
  check_dtype(op, choice, {DType::f32}, "choice");
  const int64_t experts = choice.size(1);
  TITAN_CHECK(groups >= 1 && groups <= kMaxExpertGroups && experts % groups == 0 && experts / groups >= 2,
              "{}: {} experts do not fall into {} groups of at least 2 (at most {} groups)", op, experts, groups,
              kMaxExpertGroups);
  TITAN_CHECK(kept >= 1 && kept <= groups, "{}: kept groups {} must be in [1, {}]", op, kept, groups);
  Tensor out = Tensor::empty(choice.shape(), DType::f32, choice.device());
  if (has_work(out)) limit_to_groups_kernels(choice.device(), out, choice.contiguous(), groups, kept);
  return out;
}

ExpertOrder expert_order(const Tensor& indices, int64_t num_experts) {
  const trace::OpScope op_scope("expert_order");
  check_defined("expert_order", indices, "indices");
  check_rank("expert_order", indices, 2, "indices");
  check_dtype("expert_order", indices, {DType::i64}, "indices");
  TITAN_CHECK(num_experts >= 1, "expert_order: {} experts", num_experts);
  const int64_t pairs = indices.numel();
  ExpertOrder out{Tensor::empty({pairs}, DType::i64, indices.device()),
                  Tensor::empty({pairs}, DType::i64, indices.device()),
                  Tensor::empty({num_experts}, DType::i64, indices.device())};
  if (!indices.device().is_meta()) {
    expert_order_kernels(indices.device(), out.order, out.inverse, out.counts, indices.contiguous());
  }
  return out;
}

Tensor permute_tokens(const Tensor& x, const Tensor& order, int64_t k) {
  const trace::OpScope op_scope("permute_tokens");
  check_defined("permute_tokens", x, "x");
  check_rank("permute_tokens", x, 2, "x");
  check_flat_pairs("permute_tokens", order, x.size(0), k, "order");
  check_same_device("permute_tokens", x, order);
  Tensor rows = Tensor::empty({order.size(0), x.size(1)}, x.dtype(), x.device());
  if (has_work(rows)) permute_tokens_kernels(x.device(), rows, x.contiguous(), order.contiguous(), k);
  return rows;
}

Tensor unpermute_sum(const Tensor& grad_rows, const Tensor& inverse, int64_t k) {
  const trace::OpScope op_scope("unpermute_sum");
  check_defined("unpermute_sum", grad_rows, "grad_rows");
  check_rank("unpermute_sum", grad_rows, 2, "grad_rows");
  TITAN_CHECK(k >= 1 && grad_rows.size(0) % k == 0, "unpermute_sum: {} rows are not a multiple of k = {}",
              grad_rows.size(0), k);
  const int64_t tokens = grad_rows.size(0) / k;
  check_flat_pairs("unpermute_sum", inverse, tokens, k, "inverse");
  Tensor grad_x = Tensor::empty({tokens, grad_rows.size(1)}, grad_rows.dtype(), grad_rows.device());
  if (has_work(grad_x)) {
    unpermute_sum_kernels(grad_rows.device(), grad_x, grad_rows.contiguous(), inverse.contiguous(), k);
  }
  return grad_x;
}

Tensor combine_experts(const Tensor& rows, const Tensor& inverse, const Tensor& weights) {
  const trace::OpScope op_scope("combine_experts");
  check_defined("combine_experts", rows, "rows");
  check_rank("combine_experts", rows, 2, "rows");
  check_rank("combine_experts", weights, 2, "weights");
  check_dtype("combine_experts", weights, {DType::f32}, "weights");
  const int64_t tokens = weights.size(0), k = weights.size(1);
  TITAN_CHECK(rows.size(0) == tokens * k, "combine_experts: {} rows for {} tokens x {} slots", rows.size(0), tokens, k);
  check_flat_pairs("combine_experts", inverse, tokens, k, "inverse");
  Tensor out = Tensor::empty({tokens, rows.size(1)}, rows.dtype(), rows.device());
  if (has_work(out)) {
    combine_experts_kernels(rows.device(), out, rows.contiguous(), inverse.contiguous(), weights.contiguous());
  }
  return out;
}

CombineGrads combine_experts_backward(const Tensor& grad_out, const Tensor& rows, const Tensor& inverse,
                                      const Tensor& weights) {
  const trace::OpScope op_scope("combine_experts_backward");
  TITAN_CHECK(grad_out.dim() == 2 && grad_out.size(0) == weights.size(0) && grad_out.size(1) == rows.size(1),
              "combine_experts_backward: grad {} does not match {} tokens of {} columns", shape_str(grad_out.shape()),
              weights.size(0), rows.size(1));
  check_same_dtype("combine_experts_backward", grad_out, rows);
  CombineGrads grads{Tensor::empty(rows.shape(), rows.dtype(), rows.device()),
                     Tensor::empty(weights.shape(), DType::f32, rows.device())};
  if (has_work(grads.grad_rows)) {
    combine_experts_backward_kernels(rows.device(), grads.grad_rows, grads.grad_weights, grad_out.contiguous(),
                                     rows.contiguous(), inverse.contiguous(), weights.contiguous());
  }
  return grads;
}

Tensor gather_columns(const Tensor& x, const Tensor& indices) {
  const trace::OpScope op_scope("gather_columns");
  check_rank("gather_columns", x, 2, "x");
  check_rank("gather_columns", indices, 2, "indices");
  check_dtype("gather_columns", x, {DType::f32}, "x");
  check_dtype("gather_columns", indices, {DType::i64}, "indices");
  TITAN_CHECK(indices.size(0) == x.size(0), "gather_columns: {} rows of indices for {} rows", indices.size(0),
              x.size(0));
  Tensor out = Tensor::empty(indices.shape(), DType::f32, x.device());
  if (has_work(out)) gather_columns_kernels(x.device(), out, x.contiguous(), indices.contiguous());
  return out;
}

Tensor scatter_columns(const Tensor& grad, const Tensor& indices, int64_t columns) {
  const trace::OpScope op_scope("scatter_columns");
  check_same_shape("scatter_columns", grad, indices);
  check_dtype("scatter_columns", grad, {DType::f32}, "grad");
  Tensor out = Tensor::zeros({grad.size(0), columns}, DType::f32, grad.device());
  if (has_work(grad)) scatter_columns_kernels(grad.device(), out, grad.contiguous(), indices.contiguous());
  return out;
}

Tensor normalize_rows(const Tensor& x) {
  const trace::OpScope op_scope("normalize_rows");
  check_rank("normalize_rows", x, 2, "x");
  check_dtype("normalize_rows", x, {DType::f32}, "x");
  Tensor out = Tensor::empty(x.shape(), DType::f32, x.device());
  if (has_work(out)) normalize_rows_kernels(x.device(), out, x.contiguous());
  return out;
}

Tensor normalize_rows_backward(const Tensor& grad_out, const Tensor& x) {
  const trace::OpScope op_scope("normalize_rows_backward");
  check_same_shape("normalize_rows_backward", grad_out, x);
  Tensor grad_x = Tensor::empty(x.shape(), DType::f32, x.device());
  if (has_work(grad_x)) normalize_rows_backward_kernels(x.device(), grad_x, grad_out.contiguous(), x.contiguous());
  return grad_x;
}

Tensor sigmoid(const Tensor& x) {
  const trace::OpScope op_scope("sigmoid");
  check_defined("sigmoid", x, "x");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (has_work(y)) sigmoid_kernels(x.device(), y, x.contiguous());
  return y;
}

Tensor sigmoid_backward(const Tensor& grad_out, const Tensor& y) {
  const trace::OpScope op_scope("sigmoid_backward");
  check_same_shape("sigmoid_backward", grad_out, y);
  check_same_dtype("sigmoid_backward", grad_out, y);
  Tensor grad_x = Tensor::empty(y.shape(), y.dtype(), y.device());
  if (has_work(grad_x)) sigmoid_backward_kernels(y.device(), grad_x, grad_out.contiguous(), y.contiguous());
  return grad_x;
}

}  // namespace titan::ops
