// The CLIP text encoder (Hugging Face's CLIPTextModel), FLUX.1's frozen
// pooled-text encoder: token plus learned position embeddings, pre-norm
// blocks of causal multi-head attention (with biases) and a quick-GELU MLP
// (x * sigmoid(1.702 x)), LayerNorms with weight and bias, a final LayerNorm,
// and the pooled output: the final state at the first end-of-text token,
// found as the largest id (CLIP's own rule, which clip-vit-large-patch14
// keeps). Parameters carry Hugging Face's names ("text_model.encoder.layers.0.
// self_attn.q_proj.weight"). Inference only.
#pragma once

#include <memory>
#include <vector>

#include "titan/models/flux/clip_text_config.h"
#include "titan/nn/embedding.h"
#include "titan/nn/linear.h"
#include "titan/nn/module.h"

namespace titan::models::flux {

// LayerNorm over the last dimension with a learned weight and bias.
class AffineLayerNorm : public nn::Module {
 public:
  AffineLayerNorm(int64_t width, double eps, Device device);
  Tensor forward(const Tensor& x) const;
  const double eps;
  nn::Parameter* const weight;
  nn::Parameter* const bias;
};

class ClipAttention : public nn::Module {
 public:
  ClipAttention(const ClipTextConfig& config, Device device);
  std::shared_ptr<nn::Linear> k_proj, v_proj, q_proj, out_proj;
};

class ClipMLP : public nn::Module {
 public:
  ClipMLP(const ClipTextConfig& config, Device device);
  std::shared_ptr<nn::Linear> fc1, fc2;
};

class ClipLayer : public nn::Module {
 public:
  ClipLayer(const ClipTextConfig& config, Device device);
  std::shared_ptr<ClipAttention> self_attn;
  std::shared_ptr<AffineLayerNorm> layer_norm1;
  std::shared_ptr<ClipMLP> mlp;
  std::shared_ptr<AffineLayerNorm> layer_norm2;
};

struct ClipTextOutput {
  Tensor last_hidden_state;  // [B, L, hidden]
  Tensor pooled;             // [B, hidden]
};

class ClipTextEncoder : public nn::Module {
 public:
  explicit ClipTextEncoder(const ClipTextConfig& config, Device device = Device::cpu());
  // ids [B, L] i64, L <= max_position_embeddings.
  ClipTextOutput forward(const Tensor& ids) const;

  const ClipTextConfig config;
  std::shared_ptr<nn::Embedding> token_embedding, position_embedding;
  std::vector<std::shared_ptr<ClipLayer>> layers;
  std::shared_ptr<AffineLayerNorm> final_layer_norm;
};

}  // namespace titan::models::flux
