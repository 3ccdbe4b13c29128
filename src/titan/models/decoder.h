// The decoder-only transformer every family builds: token embeddings, a
// stack of pre-norm blocks, a final norm and an output projection (tied to
// the embeddings in the small models). The config lists one block config per
// layer, so layers may differ (dense or mixture-of-experts FFN, global or
// sliding-window attention, RoPE or none); families differ only in the config
// they build (models/<family>/). Single-device code: no collectives, no device
// branches, no casts.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "titan/core/generator.h"
#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
#include "titan/nn/module_dict.h"
#include "titan/nn/mtp_block.h"
#include "titan/nn/rms_norm.h"
#include "titan/nn/transformer_block.h"
#include "titan/ops/cross_entropy.h"
#include "titan/ops/rope.h"

namespace titan::models {

class Decoder;

struct LossConfig {
  bool fused = true;  // fused linear cross-entropy (logits never whole) vs linear + cross-entropy
  int64_t token_chunk = 1024;
  int64_t vocab_chunk = 0;
  float z_loss = 0.0f;
  float softcap = 0.0f;  // > 0: logits become softcap * tanh(logits / softcap) (Gemma 2's final soft-cap)
  // Multi-token prediction's weight (TorchTitan's MTPLoss mtp_scale): the loss
  // is the main cross-entropy plus mtp_scale times the mean over depths of
  // each depth's summed cross-entropy over the main loss's target count.
  double mtp_scale = 0.3;
};

struct DecoderConfig {
  int64_t vocab_size = 0;
  // Layer i's block (its FQNs are "layers.i."); every layer has the same dim.
  std::vector<nn::TransformerBlockConfig> layers;
  double rope_theta = 10000.0;
  ops::RopeScaling rope_scaling;  // of the main table (Gemma 3: its global layers; the local table is never scaled)
  // The base of the second RoPE table, for layers with attention.local_rope
  // (Gemma 3's sliding layers: rope_local_base_freq, unscaled); 0 = none.
  double local_rope_theta = 0.0;
  // Token embeddings are multiplied by this (Gemma: sqrt(dim)); 0 = not scaled.
  double embedding_scale = 0.0;
  // > 0: the looked-up embeddings go through a scaleless RMSNorm of this eps (Muse Glimmer).
  double embedding_norm_eps = 0.0;
  // The final norm's eps, weight offset and initial scale when they differ from
  // the first block's norms (Muse Glimmer: scale w itself, w drawn as 0); its dim is the model's.
  std::optional<nn::RMSNormConfig> final_norm;
  // The final hidden states are multiplied by this before the output
  // projection, so logits are cap * tanh(m * z / cap) (Muse Glimmer's
  // output_multiplier) through the fused loss as well as in logits().
  double output_multiplier = 1.0;
  int64_t max_seq_len = 2048;  // rows of the RoPE table
  bool tie_embeddings = false;
  // DeepSeek-V3's multi-token prediction (TorchTitan's mtp_layers, Hugging
  // Face's num_nextn_predict_layers): depth k (FQNs "mtp_layers.k-1.") is an
  // nn::MtpBlock of this block config predicting the token k + 1 places ahead
  // in training; generation and logits() never run them. Empty: off.
  std::vector<nn::TransformerBlockConfig> mtp_layers;
  LossConfig loss;

  int64_t n_layers() const { return static_cast<int64_t>(layers.size()); }
  int64_t dim() const { return layers.empty() ? 0 : layers.front().attention.dim; }
  // Every layer `block` (the families whose layers are all alike).
  void set_layers(int64_t count, const nn::TransformerBlockConfig& block) {
    layers.assign(static_cast<size_t>(count), block);
  }
  // Applies `edit` to every layer's block config, the multi-token prediction depths' included.
  template <typename Edit>
  void edit_layers(Edit&& edit) {
    for (nn::TransformerBlockConfig& layer : layers) edit(layer);
    for (nn::TransformerBlockConfig& layer : mtp_layers) edit(layer);
  }
  std::shared_ptr<Decoder> build(Device device = Device::cpu()) const;
};

// One batch as the model sees it ([B, S] each; positions and document ids optional).
struct DecoderInputs {
  Tensor input_ids;
  Tensor positions;
  Tensor document_ids;  // set when packed documents must not attend to each other
};

// Keys and values of every layer for incremental decoding.
struct KVCache {
  // Per layer [B, capacity, Hkv, head_dim]; a latent-attention layer's are its
  // latents [B, capacity, kv_lora_rank] and rotated keys [B, capacity, qk_rope_head_dim];
  // a Gated DeltaNet layer's its pre-conv q | k | v [B, capacity, 2 key_dim + value_dim]
  // and recurrent state [B, Hv, Dk, Dv] f32.
  std::vector<Tensor> keys, values;
  int64_t length = 0;  // positions filled
  int64_t capacity() const { return keys.empty() ? 0 : keys.front().size(1); }
};

// The loss from final hidden states [B, S, dim], the output projection and
// next-token labels [B, S]. The default is the config's cross-entropy (fused or
// plain); tensor parallelism installs a vocabulary-parallel one.
using LossFunction = std::function<Tensor(const Tensor& hidden, const Tensor& weight, const Tensor& labels)>;
LossFunction cross_entropy_loss(const LossConfig& config);

// The parts of a training loss, for metrics.
struct LossParts {
  Tensor lm;   // 0-d f32: the mean next-token cross-entropy
  Tensor mtp;  // 0-d f32: the multi-token prediction term, mtp_scale included (undefined without MTP)
  Tensor aux;  // 0-d f32: the MoE auxiliary loss before its coefficient (undefined without one)
};

class Decoder : public nn::Module {
 public:
  Decoder(const DecoderConfig& config, Device device);

  // Final-norm hidden states [B, S, dim] (times the output multiplier).
  Tensor hidden_states(const DecoderInputs& inputs) const;
  // Logits [B, S, vocab] (for generation and evaluation; training uses loss()).
  Tensor logits(const DecoderInputs& inputs) const;
  // Mean cross-entropy of next-token labels [B, S] (ignore_index -100). With
  // MoE layers that have an auxiliary-loss coefficient, backward also gives
  // their routers coef * d(aux) (nn::MoEAuxLoss); the returned value is the
  // cross-entropy alone (plus the multi-token prediction term when the model
  // has MTP layers), and `parts` (optional) receives each.
  Tensor loss(const DecoderInputs& inputs, const Tensor& labels, LossParts* parts = nullptr) const;
  // A cache for `batch` sequences of up to `capacity` positions, in the dtype
  // forward computes in; with tensor parallelism each rank caches its own
  // key/value heads, every layer's split over `head_split` ranks.
  KVCache make_cache(int64_t batch, int64_t capacity, DType dtype, int64_t head_split = 1) const;
  // Logits [B, T, vocab] for T new tokens after the cache's `length` positions; appends them to the cache.
  Tensor forward_cached(const Tensor& input_ids, KVCache& cache) const;
  // The output projection as forward sees it (the embedding table when tied).
  Tensor output_weight() const;

  // Pipeline parallelism: keeps only the modules named (the parts one rank
  // holds, as ModelSpec::module_fqns lists them) and drops the rest, so
  // named_parameters() lists what the rank holds, under the whole model's names.
  void retain_modules(const std::vector<std::string>& module_fqns);
  // One part's forward: from token ids (inputs.input_ids) when the part holds
  // the embeddings, else from `hidden` (the previous part's output), through
  // the part's layers in order, then the final norm when the part holds it.
  Tensor forward_part(const std::vector<std::string>& part, const Tensor& hidden, const DecoderInputs& inputs) const;

  // Draws every parameter this rank holds (whole or sharded) from the
  // generator's seed by name (nn::initialize): Llama 3 / TorchTitan's
  // initialisation, whose rules the constructor declares.
  void init_weights(const Generator& generator);
  // A model built on the meta device (and perhaps sharded there) gets storage
  // on `device`: parameters uninitialised (init_weights or a load fills
  // them), buffers zero, the RoPE tables computed.
  void materialize(Device device);

  const DecoderConfig config;
  std::shared_ptr<nn::Embedding> tok_embeddings;
  std::shared_ptr<nn::ModuleDict<nn::TransformerBlock>> layers;  // keyed by layer id
  std::shared_ptr<nn::RMSNorm> norm;
  std::shared_ptr<nn::Linear> output;                        // null when tied
  std::shared_ptr<nn::ModuleDict<nn::MtpBlock>> mtp_layers;  // keyed by depth - 1; null without MTP
  ops::RopeTable rope;
  ops::RopeTable local_rope;  // undefined tensors unless config.local_rope_theta > 0
  LossFunction loss_function;

 private:
  // The last layer's output, before the final norm.
  Tensor trunk(const DecoderInputs& inputs, const std::shared_ptr<nn::MoEAuxLoss>& aux) const;
  // mtp_scale times the mean over depths of each depth's summed cross-entropy
  // (targets `depth` places past `labels`, the tail ignored) over the count of
  // `labels`' targets, from the last layer's output `trunk` (TorchTitan's MTPLoss).
  Tensor mtp_loss(const Tensor& trunk, const DecoderInputs& inputs, const Tensor& labels,
                  const std::shared_ptr<nn::MoEAuxLoss>& aux) const;
  // Embeddings N(0, 1) (N(0, dim^-1/2) when tied); per layer l the output
  // projections N(0, 0.02 / sqrt(2 (l + 1))); output N(0, dim^-1/2) cut at 3 std.
  void set_init_rules();
  void build_rope_tables(Device device);
  nn::BlockInputs block_inputs(const DecoderInputs& inputs, const std::shared_ptr<nn::MoEAuxLoss>& aux) const;
  nn::AttentionInputs attention_inputs(const Tensor& positions) const;
  // The scaled (or normed) token embeddings of ids.
  Tensor embed(const Tensor& ids) const;
  // The final norm, then the output multiplier: what the output projection reads.
  Tensor finish(const Tensor& h) const;
  // Final-norm hidden states -> logits (soft-capped when the loss is).
  Tensor project_logits(const Tensor& hidden) const;
  // A fresh auxiliary loss for one forward pass, or null when no layer has one.
  std::shared_ptr<nn::MoEAuxLoss> new_aux_loss() const;
  int64_t moe_layers_ = 0;
};

}  // namespace titan::models
