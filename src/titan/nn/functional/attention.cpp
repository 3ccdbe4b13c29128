// Differentiable scaled dot-product attention (PyTorch's name; ops/attention.h):
// the flash kernel's autograd function, or the naive reference built from
// differentiable matmul/softmax over materialised scores.
#include <cmath>

#include "titan/autograd/function_node.h"
#include "titan/autograd/saved_ops.h"
#include "titan/nn/functional.h"
#include "titan/ops/attention.h"

namespace titan::F {

using autograd::record;

AttentionImpl parse_attention_impl(const std::string& name) {
  if (name == "flash") return AttentionImpl::flash;
  if (name == "naive") return AttentionImpl::naive;
  fail("unknown attention implementation '{}' (expected flash or naive)", name);
}

namespace {

Tensor flash_path(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask, float scale) {
  // Per-op selective checkpointing may hand back the output and its log-sum-exp from the forward.
  const std::vector<Tensor> kept = autograd::run_saved_op(autograd::SavedOpKind::attention, {}, [&] {
    ops::AttentionOutput computed = ops::flash_attention(q, k, v, mask, scale);
    return std::vector<Tensor>{computed.out, computed.lse};
  });
  ops::AttentionOutput out{kept[0], kept[1]};
  ops::AttentionMask saved_mask = mask;
  if (mask.document_ids.defined()) saved_mask.document_ids = mask.document_ids.detach();
  if (mask.sinks.defined()) saved_mask.sinks = mask.sinks.detach();
  const Tensor sq = q.detach(), sk = k.detach(), sv = v.detach(), so = out.out.detach(), lse = out.lse;
  const auto backward = [=](const auto& g) {
    ops::AttentionGrads grads = ops::flash_attention_backward(g[0], sq, sk, sv, so, lse, saved_mask, scale);
    std::vector<Tensor> result{grads.grad_q, grads.grad_k, grads.grad_v};
    if (grads.grad_sinks.defined()) result.push_back(grads.grad_sinks);
    return result;
  };
  // The sinks are a learned parameter: one more input when the mask has them.
  if (mask.sinks.defined()) {
    record("FlashAttentionBackward", {&q, &k, &v, &mask.sinks}, {&out.out}, backward);
  } else {
    record("FlashAttentionBackward", {&q, &k, &v}, {&out.out}, backward);
  }
  return out.out;
}

// [B, S, H, D] -> [B * H, S, D] with the kv heads repeated to `heads`.
Tensor heads_first(const Tensor& x, int64_t heads) {
  const int64_t batch = x.size(0), seq = x.size(1), kv_heads = x.size(2), dim = x.size(3);
  Tensor repeated = x;
  if (kv_heads != heads) {
    const int64_t group = heads / kv_heads;
    repeated = F::reshape(F::expand(F::reshape(x, {batch, seq, kv_heads, 1, dim}), {batch, seq, kv_heads, group, dim}),
                          {batch, seq, heads, dim});
  }
  return F::reshape(F::permute(repeated, {0, 2, 1, 3}), {batch * heads, seq, dim});
}

// Everything in f32 whatever the input dtype: this is the reference path.
Tensor naive_path(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask, float scale) {
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), k_len = k.size(1), value_dim = v.size(3);
  TITAN_CHECK(mask.logit_softcap >= 0.0f && std::isfinite(mask.logit_softcap),
              "scaled_dot_product_attention: logit_softcap must be finite and >= 0 (0 = no cap), got {}",
              mask.logit_softcap);
  const Tensor q3 = heads_first(F::cast(q, DType::f32), heads);
  const Tensor k3 = heads_first(F::cast(k, DType::f32), heads);
  const Tensor v3 = heads_first(F::cast(v, DType::f32), heads);
  Tensor scores = F::scale(F::matmul(q3, F::transpose(k3, 1, 2)), scale);
  // Gemma 2's soft cap goes on the scaled scores, before the mask.
  if (mask.logit_softcap > 0.0f) scores = soft_cap(scores, mask.logit_softcap);
  const Tensor bias = ops::attention_mask_bias(mask, batch, q_len, k_len, q.device())
                          .unsqueeze(1)
                          .expand({batch, heads, q_len, k_len})
                          .reshape({batch * heads, q_len, k_len});
  Tensor probabilities;
  if (mask.sinks.defined()) {
    // gpt-oss's sinks: one more softmax column per row holding its head's
    // logit, dropped after the softmax (it has no value).
    TITAN_CHECK(mask.sinks.dim() == 1 && mask.sinks.size(0) == heads,
                "scaled_dot_product_attention: sinks {} must be [Hq] = [{}]", shape_str(mask.sinks.shape()), heads);
    const Tensor sink_column =
        F::reshape(F::expand(F::reshape(F::cast(mask.sinks, DType::f32), {1, heads, 1, 1}), {batch, heads, q_len, 1}),
                   {batch * heads, q_len, 1});
    probabilities = F::narrow(F::softmax(F::concat(F::add(scores, bias), sink_column, 2)), 2, 0, k_len);
  } else {
    probabilities = F::softmax(F::add(scores, bias));
  }
  const Tensor out = F::matmul(probabilities, v3);
  return F::cast(F::contiguous(F::permute(F::view(out, {batch, heads, q_len, value_dim}), {0, 2, 1, 3})), q.dtype());
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask,
                                    float scale, AttentionImpl impl) {
  return impl == AttentionImpl::flash ? flash_path(q, k, v, mask, scale) : naive_path(q, k, v, mask, scale);
}

}  // namespace titan::F
