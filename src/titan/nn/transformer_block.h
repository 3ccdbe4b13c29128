// A decoder block: h = x + post(attention(pre(x))); out = h + post(ffn(pre(h))),
// the FFN dense (SwiGLU or GeGLU) or a mixture of experts, as the block's
// config says. `pre` is the usual pre-norm (Llama); `post` normalises a
// sublayer's output before the residual add (Gemma 2/3 have both, OLMo 2 only
// the post-norms); either is the identity when its flag is off.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "titan/nn/attention.h"
#include "titan/nn/block.h"
#include "titan/nn/feed_forward.h"
#include "titan/nn/gated_delta_net.h"
#include "titan/nn/mla_attention.h"
#include "titan/nn/moe.h"
#include "titan/nn/rms_norm.h"

namespace titan::nn {

class TransformerBlock;

struct TransformerBlockConfig {
  AttentionConfig attention;
  // Multi-head latent attention instead (DeepSeek-V3): `attention` then gives
  // its dim, heads, rotated head dim, RoPE style, norm eps and kernel.
  std::optional<MlaConfig> mla;
  // Gated DeltaNet linear attention instead (Qwen3.5's linear layers):
  // `attention` then gives only its dim.
  std::optional<GatedDeltaNetConfig> delta_net;
  FeedForwardConfig feed_forward;  // the dense FFN, unless moe is set
  std::optional<MoEConfig> moe;    // a mixture-of-experts FFN instead
  double norm_eps = 1e-5;
  double post_norm_eps = 0.0;       // the post-norms' eps when it differs (Muse Glimmer: 1e-8); 0 = norm_eps
  double norm_weight_offset = 0.0;  // the block's norms scale by (offset + w): Gemma's 1
  bool pre_norms = true;            // attention_norm and ffn_norm before the sublayers
  bool post_norms = false;          // post_attention_norm and post_ffn_norm after them
  std::shared_ptr<TransformerBlock> build(Device device = Device::cpu()) const;
};

// What every block needs for one forward pass of the model.
struct BlockInputs {
  AttentionInputs attention;
  std::shared_ptr<MoEAuxLoss> moe_aux;  // the pass's auxiliary loss (null: none)
};

class TransformerBlock : public Block {
 public:
  TransformerBlock(const TransformerBlockConfig& config, Device device);
  Tensor forward(const Tensor& x, const BlockInputs& inputs) const;
  // Incremental decoding with this layer's KV cache (see Attention::forward_cached;
  // a latent-attention block's caches are its latents and rotated shared keys).
  Tensor forward_cached(const Tensor& x, const AttentionInputs& inputs, const Tensor& key_cache,
                        const Tensor& value_cache, int64_t start) const;
  // Init rules: norms to one; projections as Attention/FeedForward say, with
  // output projections at `output_std` (Llama 3: 0.02 / sqrt(2 * (layer + 1))).
  void set_init(double output_std);

  const TransformerBlockConfig config;
  std::shared_ptr<RMSNorm> attention_norm, ffn_norm;            // null without pre_norms
  std::shared_ptr<RMSNorm> post_attention_norm, post_ffn_norm;  // null without post_norms
  std::shared_ptr<Attention> attention;                         // null in a latent-attention block
  std::shared_ptr<MlaAttention> latent_attention;               // null unless config.mla (registered as "attention")
  std::shared_ptr<GatedDeltaNet> linear_attention;  // null unless config.delta_net (registered as "attention")
  std::shared_ptr<FeedForward> feed_forward;        // null in a mixture-of-experts block
  std::shared_ptr<MoE> moe;                         // null in a dense block

 protected:
  // The block's computation without the runner (nn::MtpBlock runs it inside its own body).
  Tensor compute(const Tensor& x, const BlockInputs& inputs) const;

 private:
  // x + attend(norm(x)), then the feed-forward residual: shared by both forwards.
  Tensor residual(const Tensor& x, const std::function<Tensor(const Tensor&)>& attend,
                  const std::shared_ptr<MoEAuxLoss>& aux) const;
};

}  // namespace titan::nn
