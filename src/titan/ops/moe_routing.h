// The token routing of a mixture-of-experts layer, as ops: each token's top-k
// experts, the order that makes every expert's rows contiguous, moving token
// rows into that order and back, and the weighted combine of the experts'
// outputs. T tokens, E experts, k experts per token; the (token, slot) pairs
// are numbered flat as token * k + slot. Everything is deterministic: sorts
// are stable, and every sum runs over a token's slots in slot order, never
// through atomics, so results do not depend on threads or devices.
#pragma once

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

struct TopK {
  Tensor values;   // [T, k], each row descending
  Tensor indices;  // [T, k] i64; equal scores keep the lower index first
};
// The k largest entries of each row of scores [T, E] (f32).
TopK topk(const Tensor& scores, int64_t k);

// Group-limited routing (DeepSeek-V3's n_group / topk_group): the E experts
// of choice [T, E] (f32) fall into `groups` equal groups of at least 2 (at
// most 64 groups); each group scores the sum of its two largest entries, and
// every entry outside the token's `kept` best groups becomes 0, the value
// Hugging Face's router masks them with. Equal group scores keep the lower
// group first, as topk does.
Tensor limit_to_groups(const Tensor& choice, int64_t groups, int64_t kept);
inline constexpr int64_t kMaxExpertGroups = 64;

struct ExpertOrder {
  Tensor order;    // [T*k] i64: the flat (token, slot) pair at each position of the expert-ordered rows
  Tensor inverse;  // [T*k] i64: the position of each flat (token, slot) pair
  Tensor counts;   // [E] i64: rows per expert, in expert order (expert e's rows follow experts 0..e-1's)
};
// A stable counting sort of the pairs by expert: indices [T, k] i64, each in [0, E).
ExpertOrder expert_order(const Tensor& indices, int64_t num_experts);

// rows[p] = x[order[p] / k] for x [T, D]: each token's row once per slot, in expert order.
Tensor permute_tokens(const Tensor& x, const Tensor& order, int64_t k);
// The backward of permute_tokens: grad_x[t] = sum over slots s of grad_rows[inverse[t*k + s]].
Tensor unpermute_sum(const Tensor& grad_rows, const Tensor& inverse, int64_t k);

// out[t] = sum over s of weights[t, s] * rows[inverse[t*k + s]]: the experts'
// outputs rows [T*k, D] (f32 or bf16) back in token order, weighted by the
// router (weights [T, k] f32); f32 accumulation, out in rows' dtype.
Tensor combine_experts(const Tensor& rows, const Tensor& inverse, const Tensor& weights);
struct CombineGrads {
  Tensor grad_rows;     // [T*k, D] in rows' dtype: weights[t, s] * grad_out[t]
  Tensor grad_weights;  // [T, k] f32: <grad_out[t], rows[inverse[t*k + s]]>
};
CombineGrads combine_experts_backward(const Tensor& grad_out, const Tensor& rows, const Tensor& inverse,
                                      const Tensor& weights);

// out[t, s] = x[t, indices[t, s]] for x [T, E] f32; its backward writes grad [T, k]
// into the chosen columns of a zero [T, columns].
Tensor gather_columns(const Tensor& x, const Tensor& indices);
Tensor scatter_columns(const Tensor& grad, const Tensor& indices, int64_t columns);

// out[t, :] = x[t, :] / sum(x[t, :]) (f32; a row summing to 0 stays 0), and its backward.
Tensor normalize_rows(const Tensor& x);
Tensor normalize_rows_backward(const Tensor& grad_out, const Tensor& x);

// The logistic function (f32 or bf16) and its backward from the output y.
Tensor sigmoid(const Tensor& x);
Tensor sigmoid_backward(const Tensor& grad_out, const Tensor& y);

using TopKKernel = void(const Tensor& values, const Tensor& indices, const Tensor& scores);
using LimitToGroupsKernel = void(const Tensor& out, const Tensor& choice, int64_t groups, int64_t kept);
using ExpertOrderKernel = void(const Tensor& order, const Tensor& inverse, const Tensor& counts, const Tensor& indices);
using PermuteTokensKernel = void(const Tensor& rows, const Tensor& x, const Tensor& order, int64_t k);
using UnpermuteSumKernel = void(const Tensor& grad_x, const Tensor& grad_rows, const Tensor& inverse, int64_t k);
using CombineExpertsKernel = void(const Tensor& out, const Tensor& rows, const Tensor& inverse, const Tensor& weights);
using CombineExpertsBackwardKernel = void(const Tensor& grad_rows, const Tensor& grad_weights, const Tensor& grad_out,
                                          const Tensor& rows, const Tensor& inverse, const Tensor& weights);
using GatherColumnsKernel = void(const Tensor& out, const Tensor& x, const Tensor& indices);
using ScatterColumnsKernel = void(const Tensor& out, const Tensor& grad, const Tensor& indices);
using NormalizeRowsKernel = void(const Tensor& out, const Tensor& x);
using NormalizeRowsBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x);
using SigmoidKernel = void(const Tensor& y, const Tensor& x);
using SigmoidBackwardKernel = void(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y);
inline Op<TopKKernel> topk_kernels{"topk"};
inline Op<LimitToGroupsKernel> limit_to_groups_kernels{"limit_to_groups"};
inline Op<ExpertOrderKernel> expert_order_kernels{"expert_order"};
inline Op<PermuteTokensKernel> permute_tokens_kernels{"permute_tokens"};
inline Op<UnpermuteSumKernel> unpermute_sum_kernels{"unpermute_sum"};
inline Op<CombineExpertsKernel> combine_experts_kernels{"combine_experts"};
inline Op<CombineExpertsBackwardKernel> combine_experts_backward_kernels{"combine_experts_backward"};
inline Op<GatherColumnsKernel> gather_columns_kernels{"gather_columns"};
inline Op<ScatterColumnsKernel> scatter_columns_kernels{"scatter_columns"};
inline Op<NormalizeRowsKernel> normalize_rows_kernels{"normalize_rows"};
inline Op<NormalizeRowsBackwardKernel> normalize_rows_backward_kernels{"normalize_rows_backward"};
inline Op<SigmoidKernel> sigmoid_kernels{"sigmoid"};
inline Op<SigmoidBackwardKernel> sigmoid_backward_kernels{"sigmoid_backward"};

}  // namespace titan::ops
