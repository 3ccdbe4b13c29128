// FLUX's building blocks as single-device modules, with TorchTitan's
// parameter names ("double_blocks.0.img_attn.qkv.weight"): the adaptive
// modulation, the double-stream block (image and text streams with weights
// of their own, attending jointly), the single-stream block (attention and
// MLP side by side from one projection) and the final layer.
//
// Every piece is composed from the shared differentiable ops (nn/functional.h):
// this is the plain path that a fused one will be tested against. Where an op
// of its own is missing, the composition says so.
#pragma once

#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "titan/models/flux/flux_config.h"
#include "titan/nn/attention.h"
#include "titan/nn/block.h"
#include "titan/nn/linear.h"
#include "titan/nn/module.h"
#include "titan/nn/rms_norm.h"
#include "titan/ops/rope.h"

namespace titan::models::flux {

// ---- the functions the blocks are made of ----

// LayerNorm over the last dimension without a learned affine:
// (x - mean) / sqrt(var + eps), which is RMSNorm of the centred x.
Tensor layer_norm_without_affine(const Tensor& x, float eps);
// PyTorch's gelu(approximate="tanh"), as GeGLU with an up projection of ones.
Tensor gelu_tanh(const Tensor& x);
// (1 + scale) * x + shift, with shift and scale [B, D] broadcast over x's tokens [B, L, D].
Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale);
// x + gate * y, with gate [B, D] broadcast over the tokens of x and y [B, L, D].
Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& y);
// Sinusoidal embedding [N, dim] f32 of t [N] (scaled by time_factor first):
// cos of every frequency, then sin, frequencies max_period^(-i / (dim / 2)).
Tensor timestep_embedding(const Tensor& t, int64_t dim, double max_period = 10000.0, double time_factor = 1000.0);

// RoPE over three position axes: axis a rotates features [sum of the earlier
// axes' widths, + axes_dim[a]) of each head, as interleaved pairs, by its own
// position id times theta^(-2i / axes_dim[a]).
struct AxesRope {
  std::array<ops::RopeTable, 3> tables;
  std::array<Tensor, 3> positions;  // [B, L] i64 each
  std::array<int64_t, 3> widths{};
};
// ids [B, L, 3] i64 (non-negative) -> the tables and positions for apply.
AxesRope axes_rope(const Tensor& ids, const std::array<int64_t, 3>& axes_dim, double theta);
// x [B, L, H, D] with D the axes' total width -> the rotated x.
Tensor apply_axes_rope(const Tensor& x, const AxesRope& rope);

// ---- modules ----

// TorchTitan's initialisation of FLUX's projections: Xavier-uniform weights
// (bound sqrt(6 / (in + out))) and zero biases.
void xavier_uniform(nn::Linear& linear);

// Shift, scale and gate [B, D] for one LayerNorm'd branch.
struct Modulated {
  Tensor shift, scale, gate;
};

// lin(silu(vec)) cut into 3 (single) or 6 (double: two branches) pieces.
class Modulation : public nn::Module {
 public:
  Modulation(int64_t hidden_size, bool is_double, Device device);
  std::vector<Modulated> forward(const Tensor& vec) const;
  const bool is_double;
  std::shared_ptr<nn::Linear> lin;
};

// out_layer(silu(in_layer(x))): the timestep, guidance and pooled-text embedders.
class MLPEmbedder : public nn::Module {
 public:
  MLPEmbedder(int64_t in_dim, int64_t hidden_dim, Device device);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::Linear> in_layer, out_layer;
};

// RMSNorm of each head's queries and keys, with a learned scale each.
class QKNorm : public nn::Module {
 public:
  QKNorm(int64_t head_dim, double eps, Device device);
  std::shared_ptr<nn::RMSNorm> query_norm, key_norm;
};

// Queries, keys and values [B, L, H, D] of one stream, q and k normalised.
struct HeadsQKV {
  Tensor q, k, v;
};

// One stream's attention weights in a double block: qkv, the q/k norms, proj.
class FluxAttention : public nn::Module {
 public:
  FluxAttention(const FluxConfig& config, Device device);
  HeadsQKV qkv_heads(const Tensor& x) const;  // x [B, L, hidden]
  const int64_t num_heads;
  std::shared_ptr<nn::Linear> qkv;
  std::shared_ptr<QKNorm> norm;
  std::shared_ptr<nn::Linear> proj;
};

// The double block's per-stream MLP, Sequential(Linear, GELU, Linear) in
// TorchTitan: its linears are children "0" and "2".
class FluxMLP : public nn::Module {
 public:
  FluxMLP(int64_t hidden_size, int64_t mlp_hidden_dim, Device device);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<nn::Linear> in, out;
};

// Non-causal attention of q, k, v [B, L, H, D] -> [B, L, H * D], through
// `core` when one is installed (context parallelism's ring attention), else
// the attention kernel.
Tensor joint_attention(const HeadsQKV& heads, const AxesRope& rope, const nn::AttentionCore& core);

// The residual stream the blocks read and write, one tensor (an nn::Block
// carries one): [B, 1 + Lt + Li, hidden], the conditioning vector in row 0,
// then the text tokens, then the image tokens. The vector passes through
// every block unchanged; carried in the stream, it is saved, recomputed and
// differentiated by a block's runner (checkpointing, FSDP) like the tokens.
Tensor pack_stream(const Tensor& vec, const Tensor& tokens);  // [B, D], [B, L, D] -> [B, 1 + L, D]
Tensor stream_vec(const Tensor& stream);                      // row 0: [B, D]
// `count` tokens from token `start` (the vector's row not counted): [B, count, D].
Tensor stream_tokens(const Tensor& stream, int64_t start, int64_t count);

class DoubleStreamBlock : public nn::Block {
 public:
  DoubleStreamBlock(const FluxConfig& config, Device device);
  // The stream's first `text_tokens` tokens are the text stream, the rest the
  // image stream; rope covers both, text first.
  Tensor forward(const Tensor& stream, int64_t text_tokens, const AxesRope& rope) const;
  // Replaces the attention kernel (nullptr: back to the kernel), as nn::Attention::set_core.
  void set_attention_core(nn::AttentionCore core) { core_ = std::move(core); }
  const FluxConfig config;
  std::shared_ptr<Modulation> img_mod;
  std::shared_ptr<FluxAttention> img_attn;
  std::shared_ptr<FluxMLP> img_mlp;
  std::shared_ptr<Modulation> txt_mod;
  std::shared_ptr<FluxAttention> txt_attn;
  std::shared_ptr<FluxMLP> txt_mlp;

 private:
  Tensor compute(const Tensor& stream, int64_t text_tokens, const AxesRope& rope) const;
  nn::AttentionCore core_;
};

// Attends over all of the stream's tokens, text and image alike.
class SingleStreamBlock : public nn::Block {
 public:
  SingleStreamBlock(const FluxConfig& config, Device device);
  Tensor forward(const Tensor& stream, const AxesRope& rope) const;
  void set_attention_core(nn::AttentionCore core) { core_ = std::move(core); }
  const FluxConfig config;
  std::shared_ptr<nn::Linear> linear1;  // -> q, k, v and the MLP's input, side by side
  std::shared_ptr<nn::Linear> linear2;  // attention output and the MLP's activation -> hidden
  std::shared_ptr<QKNorm> norm;
  std::shared_ptr<Modulation> modulation;

 private:
  Tensor compute(const Tensor& stream, const AxesRope& rope) const;
  nn::AttentionCore core_;
};

// adaLN_modulation is Sequential(SiLU, Linear) in TorchTitan: its linear is child "1".
class AdaLayerNormModulation : public nn::Module {
 public:
  AdaLayerNormModulation(int64_t hidden_size, Device device);
  std::shared_ptr<nn::Linear> linear;
};

class LastLayer : public nn::Module {
 public:
  LastLayer(const FluxConfig& config, Device device);
  // x [B, Li, hidden], vec [B, hidden] -> [B, Li, out_channels].
  Tensor forward(const Tensor& x, const Tensor& vec) const;
  const FluxConfig config;
  std::shared_ptr<nn::Linear> linear;
  std::shared_ptr<AdaLayerNormModulation> adaLN_modulation;
};

}  // namespace titan::models::flux
