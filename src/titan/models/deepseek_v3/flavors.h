// DeepSeek-V3 (DeepSeek-AI) and the models of its shape (Kimi's Moonlight):
// multi-head latent attention (nn/mla_attention.h) in every layer; dense
// SwiGLU FFNs in the first n_dense_layers, then mixtures of experts with
// shared experts, softmax or sigmoid scores, the aux-loss-free expert bias,
// group-limited top-k and a routed scaling factor. RoPE turns interleaved
// pairs of the rotary dims only, YaRN-extended: the flavors are TorchTitan's
// (torchtitan/models/deepseek_v3), under its names.
#pragma once

#include "titan/models/model_spec.h"

namespace titan::models::deepseek_v3 {

// TorchTitan's hyper-parameters (Hugging Face's config.json name after each).
struct Args {
  int64_t dim = 2048;                // hidden_size
  int64_t n_layers = 27;             // num_hidden_layers
  int64_t n_dense_layers = 1;        // first_k_dense_replace
  int64_t n_heads = 16;              // num_attention_heads
  int64_t q_lora_rank = 0;           // q_lora_rank (0: null, a direct query projection)
  int64_t kv_lora_rank = 512;        // kv_lora_rank
  int64_t qk_nope_head_dim = 128;    // qk_nope_head_dim
  int64_t qk_rope_head_dim = 64;     // qk_rope_head_dim
  int64_t v_head_dim = 128;          // v_head_dim
  int64_t dense_hidden_dim = 10944;  // intermediate_size
  int64_t moe_hidden_dim = 1408;     // moe_intermediate_size
  int64_t num_experts = 64;          // n_routed_experts
  int64_t num_shared_experts = 2;    // n_shared_experts
  int64_t top_k = 6;                 // num_experts_per_tok
  std::string score = "softmax";     // scoring_func (DeepSeek-V3's is sigmoid)
  int64_t num_expert_groups = 0;     // n_group (0: no group limit)
  int64_t num_limited_groups = 0;    // topk_group
  double route_scale = 1.0;          // routed_scaling_factor
  bool route_norm = false;           // norm_topk_prob
  double load_balance_coeff = 1e-3;  // the expert bias's step (e_score_correction_bias)
  int64_t vocab_size = 102400;
  double norm_eps = 1e-5;  // rms_norm_eps
  double rope_theta = 10000.0;
  // YaRN (rope_scaling): the context extension factor and the attention
  // temperature's mscale (TorchTitan's mscale; HF's mscale_all_dim), 1 = none.
  double rope_factor = 40.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t original_seq_len = 4096;
  double mscale = 0.70;
  int64_t max_seq_len = 4096 * 4;
  bool tie_embeddings = false;
  // Multi-token prediction depths (TorchTitan's model_registry num_mtp_layers,
  // 0 in every flavor as there; HF's num_nextn_predict_layers, 1 in
  // DeepSeek-V3's published checkpoints), each a copy of the last layer's block.
  int64_t num_mtp_layers = 0;
};

// TorchTitan's YaRN scaling of the flavor (none when rope_factor <= 1).
ops::RopeScaling rope_scaling(const Args& args);
DecoderConfig to_config(const Args& args);
ModelSpec spec();

}  // namespace titan::models::deepseek_v3
