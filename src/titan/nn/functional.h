// Differentiable functions (F::): each runs its op from ops/ and, when grad
// mode is on and an input requires grad, records a backward node. Model code
// uses only these; core Tensor views never record history.
//
// An autograd function is named as the op it differentiates, and defined in
// nn/functional/<file>.cpp named as the ops/ header of that op (F::rms_norm
// for ops::rms_norm, in nn/functional/rms_norm.cpp); the sections below
// follow those files. Where PyTorch has a name for the composite (F::linear,
// F::scaled_dot_product_attention), that name is kept.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "titan/core/tensor.h"
#include "titan/ops/attention.h"
#include "titan/ops/conv2d.h"
#include "titan/ops/cross_entropy.h"
#include "titan/ops/delta_rule.h"
#include "titan/ops/float8.h"
#include "titan/ops/rope.h"

namespace titan::nn {
struct Float8LinearRecipe;
}  // namespace titan::nn

namespace titan::F {

// ---- shape.cpp: views, copies and casts (Tensor methods, core/copy.h) ----
Tensor view(const Tensor& x, const Shape& shape);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& order);
Tensor contiguous(const Tensor& x);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// a and b joined along dim (their other sizes equal); the gradient splits back.
Tensor concat(const Tensor& a, const Tensor& b, int64_t dim);
// Casts to dtype; the gradient is cast back to x's dtype (how bf16 compute
// reaches f32 master weights). Returns x itself when the dtype already matches.
Tensor cast(const Tensor& x, DType dtype);

// ---- elementwise.cpp (ops/elementwise.h) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float factor);
Tensor silu(const Tensor& x);
Tensor swiglu(const Tensor& gate, const Tensor& up);
// gelu(gate, approximate="tanh") * up: Gemma's gated feed-forward.
Tensor geglu(const Tensor& gate, const Tensor& up);
// gpt-oss's clamped SwiGLU (ops::clamped_swiglu).
Tensor clamped_swiglu(const Tensor& gate, const Tensor& up, float alpha, float limit);
// cap * tanh(x / cap), cap > 0: Gemma 2's soft-capping of attention scores and final logits.
Tensor soft_cap(const Tensor& x, float cap);

// ---- float8.cpp (ops/float8.h) ----
// F::linear with its three GEMMs on float8-cast operands, as `recipe` says
// (nn/float8_recipe.h); the bias, when defined, added after in y's dtype.
// With `weight_scale` defined, `weight` arrives cast already (FSDP's float8
// all-gather): its values are on the e4m3 grid times that tensorwise scale
// ([1]), and serve both the forward GEMM and the input gradient's (the
// recipe must cast W tensorwise to e4m3 for both, as tensorwise does).
Tensor float8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const nn::Float8LinearRecipe& recipe,
                     const Tensor& weight_scale = Tensor());
// x (a weight, any shape) cast tensorwise to e4m3 in one piece, as FSDP's
// float8 all-gather casts it: {values in compute_dtype (f32 or bf16; the
// Linear's weight gradient comes in it), scale}, the gradient of the values
// passing straight through to x (in x's dtype).
ops::Float8Operand float8_cast_weight(const Tensor& x, DType compute_dtype);

// ---- reduction.cpp (ops/reduction.h) ----
Tensor sum(const Tensor& x);   // 0-d f32
Tensor mean(const Tensor& x);  // 0-d f32

// ---- gemm.cpp (ops/gemm.h) ----
// x [..., in] @ weight[out, in]^T (+ bias [out], when defined) -> [..., out]
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// a [M, K] or [B, M, K] @ b [K, N] or [B, K, N]
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- embedding.cpp, rms_norm.cpp, softmax.cpp, rope.cpp (ops/<name>.h) ----
Tensor embedding(const Tensor& weight, const Tensor& ids);
Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps);
Tensor softmax(const Tensor& x);
Tensor rope(const Tensor& x, const ops::RopeTable& table, const Tensor& positions, ops::RopeStyle style);

// ---- moe_routing.cpp (ops/moe_routing.h) ----
Tensor sigmoid(const Tensor& x);
// x [T, E] f32 -> x[t, indices[t, s]] [T, k]
Tensor gather_columns(const Tensor& x, const Tensor& indices);
// Each row of x [T, k] f32 divided by its sum.
Tensor normalize_rows(const Tensor& x);
// Token rows x [T, D] once per slot, in the expert order of `order` (its inverse for the backward).
Tensor permute_tokens(const Tensor& x, const Tensor& order, const Tensor& inverse, int64_t k);
// The experts' rows back per token, weighted: sum over s of weights[t, s] * rows[inverse[t*k + s]].
Tensor combine_experts(const Tensor& rows, const Tensor& inverse, const Tensor& weights);

// ---- grouped_gemm.cpp (ops/grouped_gemm.h) ----
// Each expert's rows of x [N, in] times its weight w[e] [out, in]^T; counts [E] i64.
Tensor grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& counts);
// The same product as a loop of ordinary GEMMs, one per expert (the plain
// reference for grouped_gemm). It reads the counts on the host.
Tensor looped_grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& counts);

// ---- float8_grouped_gemm.cpp (ops/float8.h, ops/grouped_gemm.h) ----
// grouped_gemm with its three GEMMs on fp8 operands, each cast as `cast`
// says (nn::float8_grouped_recipe) along the dim it reduces: x per row and
// w[e] per output row along in; the gradient per row and w[e] per column
// along out; the gradient and x per expert down its tokens. The operands are
// dequantized exactly (power-of-two scales) and the grouped GEMM kernels
// multiply them in f32; x and w saved in high precision, as torchao's.
Tensor float8_grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& counts, const ops::Float8Cast& cast);

// ---- attention.cpp (ops/attention.h) ----
enum class AttentionImpl { flash, naive };
AttentionImpl parse_attention_impl(const std::string& name);
// q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] -> [B, Sq, Hq, D]. `naive`
// materialises scores (the reference path); `flash` never does.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask,
                                    float scale, AttentionImpl impl = AttentionImpl::flash);

// ---- delta_rule.cpp (ops/delta_rule.h) ----
struct GatedDeltaRuleResult {
  Tensor out;          // [B, T, Hv, Dv]
  Tensor final_state;  // [B, Hv, Dk, Dv] f32
};
// Gated DeltaNet's recurrence over a whole sequence (chunked by default);
// both outputs are differentiable, and so is initial_state when given.
GatedDeltaRuleResult gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                      const Tensor& beta, const Tensor& initial_state = Tensor(),
                                      const ops::DeltaRuleOptions& options = {});
// Decoding: the recurrent algorithm from a carried state (usually T = 1);
// returns the new state to carry.
GatedDeltaRuleResult gated_delta_rule_step(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                           const Tensor& beta, const Tensor& state, ops::DeltaRuleOptions options = {});

// ---- causal_conv1d.cpp, gdn_gates.cpp (ops/<name>.h): Gated DeltaNet's pieces ----
// x [B, T, C], weight [C, K] -> silu(depthwise causal conv) [B, T, C]; restarts per document.
Tensor causal_conv1d_silu(const Tensor& x, const Tensor& weight, const Tensor& document_ids = Tensor());
// (g, beta) [B, T, H] f32: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b).
std::pair<Tensor, Tensor> gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias);

// ---- conv2d.cpp, group_norm.cpp (ops/<name>.h): forward only, for frozen image models ----
// Both throw when grad mode is on and an input requires grad (no backward
// yet): call them under autograd::NoGradGuard.
void refuse_forward_only_under_grad(const char* op, std::initializer_list<const Tensor*> inputs);
// x [B, Cin, H, W], weight [Cout, Cin, kh, kw], bias [Cout] or undefined -> [B, Cout, Ho, Wo].
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ops::Conv2dOptions& options = {});
// x [B, C, ...] normalised over groups of C / groups channels; weight, bias [C].
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, float eps);

// ---- cross_entropy.cpp (ops/cross_entropy.h) ----
// logits [N, V], targets [N] -> 0-d f32 loss (reduced as options say).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const ops::CrossEntropyOptions& options = {});
// cross_entropy(hidden @ weight^T, targets) without materialising the logits.
Tensor fused_linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                  const ops::FusedCrossEntropyOptions& options = {});

// ---- gradient_hooks.cpp: no op; y passes through, backward acts on its gradient ----
// y unchanged; its backward hands the gradient arriving at y to `observe` first.
Tensor observe_gradient(const Tensor& y, std::function<void(const Tensor&)> observe);
// y unchanged; in backward, p (which y does not depend on) also receives
// gradient(): how a loss term that depends on p, computed nowhere in the graph
// (an auxiliary loss whose coefficient needs every layer's statistics), gets
// its gradient through whatever recomputation (activation checkpointing) the
// graph of y goes through.
Tensor with_auxiliary_gradient(const Tensor& y, const Tensor& p, std::function<Tensor()> gradient);

}  // namespace titan::F
