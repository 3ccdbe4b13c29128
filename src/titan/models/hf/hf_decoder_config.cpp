#include "titan/models/hf/hf_decoder_config.h"

#include <algorithm>
#include <cmath>

namespace titan::models {
namespace {

// The decoder's gate for the family's config.json activation.
nn::FeedForwardActivation gate(const HfFamily& family) {
  return family.activation == HfActivation::gelu_pytorch_tanh ? nn::FeedForwardActivation::gelu_tanh
                                                              : nn::FeedForwardActivation::silu;
}

// A latent-attention family's block i (DeepseekV3DecoderLayer): MLA, then a
// dense MLP before first_k_dense_replace, a mixture of experts after.
nn::TransformerBlockConfig latent_block(const HfConfig& hf, const HfFamily& family, int64_t i) {
  const HfLatentAttention& m = *hf.mla;
  nn::TransformerBlockConfig block;
  block.attention = {.dim = hf.hidden_size,
                     .n_heads = hf.num_attention_heads,
                     .head_dim = m.qk_rope_head_dim,
                     .norm_eps = hf.rms_norm_eps,
                     .rope_style = family.rope_style};
  block.mla =
      nn::MlaConfig{.q_lora_rank = m.q_lora_rank,
                    .kv_lora_rank = m.kv_lora_rank,
                    .qk_nope_head_dim = m.qk_nope_head_dim,
                    .qk_rope_head_dim = m.qk_rope_head_dim,
                    .v_head_dim = m.v_head_dim,
                    .softmax_scale = nn::mla_softmax_scale(m.qk_nope_head_dim + m.qk_rope_head_dim, hf.rope_scaling)};
  block.norm_eps = hf.rms_norm_eps;
  if (i < m.first_k_dense_replace) {
    block.feed_forward = {.dim = hf.hidden_size, .hidden_dim = hf.intermediate_size, .activation = gate(family)};
    return block;
  }
  // One group (n_group 1) limits nothing: titan's "no groups".
  const bool grouped = m.n_group > 1;
  block.moe = nn::MoEConfig{.dim = hf.hidden_size,
                            .hidden_dim = hf.moe_intermediate_size,
                            .num_experts = hf.num_experts,
                            .top_k = hf.num_experts_per_tok,
                            .num_shared_experts = m.n_shared_experts,
                            .score = nn::RouterScore::sigmoid,
                            .normalize_top_k = hf.norm_topk_prob,
                            .route_scale = m.routed_scaling_factor,
                            .num_expert_groups = grouped ? m.n_group : 0,
                            .num_limited_groups = grouped ? m.topk_group : 0,
                            // e_score_correction_bias steers the choice; training nudges it at TorchTitan's rate.
                            .load_balance_coeff = 1e-3};
  return block;
}

// A Gated DeltaNet family's model (Qwen3_5ForCausalLM and its MoE form),
// built as models/qwen3_5 builds its flavors: every layer's attention
// config set (a linear layer's too, unused there), gated full attention
// with zero-centred q/k norms and partial RoPE, every norm 1 + w.
DecoderConfig hybrid_decoder_config(const HfConfig& hf, const HfFamily& family) {
  TITAN_CHECK(hf.linear_attention.has_value(), "{}: no linear attention keys", family.architecture);
  const HfLinearAttention& m = *hf.linear_attention;
  const int64_t head_dim = hf.head_dim > 0 ? hf.head_dim : hf.hidden_size / hf.num_attention_heads;
  DecoderConfig config;
  config.vocab_size = hf.vocab_size;
  for (int64_t i = 0; i < hf.num_hidden_layers; ++i) {
    nn::TransformerBlockConfig block;
    block.attention = {.dim = hf.hidden_size,
                       .n_heads = hf.num_attention_heads,
                       .n_kv_heads = hf.num_key_value_heads > 0 ? hf.num_key_value_heads : hf.num_attention_heads,
                       .head_dim = head_dim,
                       .qk_norm = true,
                       .qk_norm_weight_offset = family.norm_weight_offset,
                       .norm_eps = hf.rms_norm_eps,
                       .rotary_dim = static_cast<int64_t>(static_cast<double>(head_dim) * hf.partial_rotary_factor),
                       .rope_style = family.rope_style,
                       .output_gate = true};
    if (static_cast<size_t>(i) < m.linear_layers.size() && m.linear_layers[static_cast<size_t>(i)]) {
      block.delta_net = nn::GatedDeltaNetConfig{.dim = hf.hidden_size,
                                                .n_key_heads = m.num_key_heads,
                                                .n_value_heads = m.num_value_heads,
                                                .key_head_dim = m.key_head_dim,
                                                .value_head_dim = m.value_head_dim,
                                                .conv_kernel_size = m.conv_kernel_dim,
                                                .norm_eps = hf.rms_norm_eps};
    }
    if (family.joined_experts) {
      // Qwen3_5MoeSparseMoeBlock: softmax top-k renormalised, one sigmoid-gated shared expert.
      block.moe = nn::MoEConfig{.dim = hf.hidden_size,
                                .hidden_dim = hf.moe_intermediate_size,
                                .num_experts = hf.num_experts,
                                .top_k = hf.num_experts_per_tok,
                                .num_shared_experts = m.shared_expert_intermediate_size / hf.moe_intermediate_size,
                                .shared_expert_gate = true,
                                .aux_loss_coef = hf.output_router_logits ? hf.router_aux_loss_coef : 0.0};
    } else {
      block.feed_forward = {.dim = hf.hidden_size, .hidden_dim = hf.intermediate_size};
    }
    block.norm_eps = hf.rms_norm_eps;
    block.norm_weight_offset = family.norm_weight_offset;
    config.layers.push_back(block);
  }
  config.rope_theta = hf.rope_theta;
  config.rope_scaling = hf.rope_scaling;
  config.max_seq_len = hf.max_position_embeddings;
  config.final_norm = nn::RMSNormConfig{.eps = hf.rms_norm_eps, .weight_offset = family.norm_weight_offset};
  config.tie_embeddings = hf.tie_word_embeddings;
  return config;
}

}  // namespace

DecoderConfig decoder_config_from_hf(const HfConfig& hf) {
  const HfFamily& family = hf_family(hf);
  if (family.gated_delta_net) return hybrid_decoder_config(hf, family);
  if (family.latent_attention) {
    TITAN_CHECK(hf.mla.has_value(), "{}: no latent attention keys", family.architecture);
    DecoderConfig config;
    config.vocab_size = hf.vocab_size;
    for (int64_t i = 0; i < hf.num_hidden_layers; ++i) config.layers.push_back(latent_block(hf, family, i));
    // DeepSeek's MTP modules: blocks of the last layer's form (layer num_hidden_layers + k in the file).
    if (!config.layers.empty()) {
      config.mtp_layers.assign(static_cast<size_t>(hf.mla->num_nextn_predict_layers), config.layers.back());
    }
    config.rope_theta = hf.rope_theta;
    config.rope_scaling = hf.rope_scaling;
    config.tie_embeddings = hf.tie_word_embeddings;
    config.max_seq_len = hf.max_position_embeddings;
    return config;
  }
  const double norm_offset = family.norm_weight_offset;
  DecoderConfig config;
  config.vocab_size = hf.vocab_size;
  const int64_t implied_head_dim = hf.hidden_size / hf.num_attention_heads;
  const int64_t head_dim = hf.head_dim > 0 ? hf.head_dim : implied_head_dim;
  // transformers rotates int(head_dim * partial_rotary_factor) features (0: the whole head).
  const auto rotary = static_cast<int64_t>(static_cast<double>(head_dim) * hf.partial_rotary_factor);
  for (int64_t i = 0; i < hf.num_hidden_layers; ++i) {
    const bool sliding = hf.sliding_window > 0 && static_cast<size_t>(i) < hf.sliding_layers.size() &&
                         hf.sliding_layers[static_cast<size_t>(i)];
    nn::TransformerBlockConfig block;
    block.attention = {
        .dim = hf.hidden_size,
        .n_heads = hf.num_attention_heads,
        .n_kv_heads = hf.num_key_value_heads > 0 ? hf.num_key_value_heads : hf.num_attention_heads,
        // Left 0 when implied, as titan's own flavors leave it.
        .head_dim = hf.head_dim > 0 && hf.head_dim != implied_head_dim ? hf.head_dim : 0,
        .qk_norm = family.qk_norm,
        .qk_norm_whole_projection = family.qk_norm_whole_projection,
        // Scaleless q/k norms (gated attention) have no weight to offset.
        .qk_norm_weight_offset = family.gated_attention ? 0.0 : norm_offset,
        .qk_norm_learnable = !family.gated_attention,
        .norm_eps = hf.rms_norm_eps,
        .qkv_bias = family.qkv_bias,
        .output_bias = family.stacked_experts,
        .rotary_dim = rotary == head_dim ? 0 : rotary,
        .rope_style = family.rope_style,
        .rope = !(static_cast<size_t>(i) < hf.nope_layers.size() && hf.nope_layers[static_cast<size_t>(i)]),
        .local_rope = family.local_rope && sliding,
        .sliding_window = sliding ? hf.sliding_window : 0,
        .scale_dim = family.score_scale_and_softcaps ? hf.query_pre_attn_scalar : 0.0,
        .logit_softcap = static_cast<float>(hf.attn_logit_softcapping),
        .sinks = family.stacked_experts,
        .query_scale = family.gated_attention ? hf.qk_scale_factor : 1.0,
        .output_gate = family.gated_attention};
    block.norm_eps = hf.rms_norm_eps;
    block.post_norm_eps = family.gated_attention ? hf.post_norm_eps : 0.0;
    block.norm_weight_offset = norm_offset;
    block.pre_norms = family.norms != HfNorms::post;
    block.post_norms = family.norms != HfNorms::pre;
    // Hugging Face's rule (Qwen3MoeDecoderLayer): MoE unless listed dense, every decoder_sparse_step-th layer.
    const bool dense_only =
        std::find(hf.mlp_only_layers.begin(), hf.mlp_only_layers.end(), i) != hf.mlp_only_layers.end();
    if (family.stacked_experts) {
      // GptOssMLP: softmax over the top k router logits (the chosen scores renormalised), biases everywhere.
      block.moe = nn::MoEConfig{.dim = hf.hidden_size,
                                .hidden_dim = hf.moe_intermediate_size,
                                .num_experts = hf.num_experts,
                                .top_k = hf.num_experts_per_tok,
                                .normalize_top_k = true,
                                .router_bias = true,
                                .expert_biases = true,
                                .activation = nn::ExpertActivation::clamped_swiglu,
                                .swiglu_alpha = hf.swiglu_alpha,
                                .swiglu_limit = hf.swiglu_limit};
    } else if (family.mixture_of_experts && !dense_only && hf.num_experts > 0 &&
               (i + 1) % hf.decoder_sparse_step == 0) {
      block.moe = nn::MoEConfig{.dim = hf.hidden_size,
                                .hidden_dim = hf.moe_intermediate_size,
                                .num_experts = hf.num_experts,
                                .top_k = hf.num_experts_per_tok,
                                .normalize_top_k = hf.norm_topk_prob,
                                .aux_loss_coef = hf.output_router_logits ? hf.router_aux_loss_coef : 0.0};
    } else {
      block.feed_forward = {.dim = hf.hidden_size, .hidden_dim = hf.intermediate_size, .activation = gate(family)};
    }
    config.layers.push_back(block);
  }
  config.rope_theta = hf.rope_theta;
  config.rope_scaling = hf.rope_scaling;
  config.local_rope_theta = family.local_rope ? hf.rope_local_base_freq : 0.0;
  config.embedding_scale = family.scaled_embeddings ? std::sqrt(static_cast<double>(hf.hidden_size)) : 0.0;
  config.loss.softcap = static_cast<float>(hf.final_logit_softcapping);
  if (family.gated_attention) {
    // Scaleless embedding norm; the final norm scales by w itself (drawn as 0, as the family's flavors draw it).
    config.embedding_norm_eps = hf.rms_norm_eps;
    config.final_norm = nn::RMSNormConfig{.eps = hf.rms_norm_eps, .weight_offset = 0.0, .initial_scale = 0.0};
    config.output_multiplier = hf.output_multiplier;
  }
  config.tie_embeddings = hf.tie_word_embeddings;
  config.max_seq_len = hf.max_position_embeddings;
  return config;
}

namespace {

// The MoE layers' shared settings, and the dense layers among them (Hugging
// Face says which layers are dense by listing them, with decoder_sparse_step 1).
// A latent-attention model's keys: every layer's MLA alike, dense layers
// first, then mixture-of-experts layers alike and in the form transformers
// computes (sigmoid scores, groups).
void describe_latent_attention(const DecoderConfig& config, const HfFamily& family, HfConfig& hf) {
  HfLatentAttention m;
  const nn::TransformerBlockConfig& first = config.layers.front();
  TITAN_CHECK(first.mla.has_value(), "layer 0 has no latent attention, which {} has", family.architecture);
  const nn::MlaConfig& a = *first.mla;
  m.q_lora_rank = a.q_lora_rank;
  m.kv_lora_rank = a.kv_lora_rank;
  m.qk_nope_head_dim = a.qk_nope_head_dim;
  m.qk_rope_head_dim = a.qk_rope_head_dim;
  m.v_head_dim = a.v_head_dim;
  TITAN_CHECK(a.scale() == nn::mla_softmax_scale(a.qk_head_dim(), config.rope_scaling),
              "a latent-attention softmax scale of {} has no {} equivalent (it is qk_head_dim^-1/2 times YaRN's "
              "mscale_all_dim correction squared: {})",
              a.scale(), family.architecture, nn::mla_softmax_scale(a.qk_head_dim(), config.rope_scaling));
  const nn::MoEConfig* experts = nullptr;
  m.first_k_dense_replace = config.n_layers();
  for (int64_t i = 0; i < config.n_layers(); ++i) {
    const nn::TransformerBlockConfig& block = config.layers[static_cast<size_t>(i)];
    TITAN_CHECK(block.mla && *block.mla == a,
                "layer {}: its latent attention differs from layer 0's, which {} cannot "
                "express",
                i, family.architecture);
    if (!block.moe) {
      TITAN_CHECK(experts == nullptr,
                  "layer {} is dense after a mixture-of-experts layer, which {} cannot express "
                  "(its dense layers are the first first_k_dense_replace)",
                  i, family.architecture);
      TITAN_CHECK(i == 0 || block.feed_forward.hidden_dim == hf.intermediate_size,
                  "dense layers of different widths have no {} equivalent", family.architecture);
      hf.intermediate_size = block.feed_forward.hidden_dim;
      continue;
    }
    const nn::MoEConfig& moe = *block.moe;
    if (experts == nullptr) m.first_k_dense_replace = i;
    TITAN_CHECK(moe.score == nn::RouterScore::sigmoid,
                "layer {}: softmax expert scores have no {} equivalent (transformers scores them with sigmoid)", i,
                family.architecture);
    TITAN_CHECK(moe.aux_loss_coef == 0.0, "layer {}: an auxiliary load-balancing loss has no {} equivalent", i,
                family.architecture);
    TITAN_CHECK(experts == nullptr ||
                    (moe.num_experts == experts->num_experts && moe.top_k == experts->top_k &&
                     moe.hidden_dim == experts->hidden_dim && moe.normalize_top_k == experts->normalize_top_k &&
                     moe.num_shared_experts == experts->num_shared_experts && moe.route_scale == experts->route_scale &&
                     moe.num_expert_groups == experts->num_expert_groups &&
                     moe.num_limited_groups == experts->num_limited_groups),
                "layer {}: its experts differ from the first MoE layer's, which {} cannot express", i,
                family.architecture);
    experts = &moe;
  }
  if (experts != nullptr) {
    hf.num_experts = experts->num_experts;
    hf.num_experts_per_tok = experts->top_k;
    hf.moe_intermediate_size = experts->hidden_dim;
    hf.norm_topk_prob = experts->normalize_top_k;
    m.n_shared_experts = experts->num_shared_experts;
    m.routed_scaling_factor = experts->route_scale;
    m.n_group = experts->num_expert_groups > 1 ? experts->num_expert_groups : 1;
    m.topk_group = experts->num_expert_groups > 1 ? experts->num_limited_groups : 1;
  }
  for (size_t k = 0; k < config.mtp_layers.size(); ++k) {
    const nn::TransformerBlockConfig& block = config.mtp_layers[k];
    TITAN_CHECK(block.mla && *block.mla == a && block.moe.has_value() == (experts != nullptr) &&
                    (!block.moe || block.moe->num_experts == experts->num_experts),
                "MTP depth {}: {} stores multi-token prediction layers in the last layer's form, which this one is not",
                k + 1, family.architecture);
  }
  m.num_nextn_predict_layers = static_cast<int64_t>(config.mtp_layers.size());
  hf.mla = m;
}

// A Gated DeltaNet family's keys: which layers are linear, their shapes (all
// alike), and the experts of the form chosen (hybrid_form): every layer's a
// softmax top-k renormalised mixture with one gated shared expert, or every
// layer dense of one width.
void describe_linear_attention(const DecoderConfig& config, const HfFamily& family, HfConfig& hf) {
  HfLinearAttention m = family.defaults.linear_attention.value_or(HfLinearAttention{});
  std::optional<nn::GatedDeltaNetConfig> first_linear;
  const nn::MoEConfig* first_moe = nullptr;
  m.linear_layers.clear();
  for (int64_t i = 0; i < config.n_layers(); ++i) {
    const nn::TransformerBlockConfig& block = config.layers[static_cast<size_t>(i)];
    m.linear_layers.push_back(block.delta_net.has_value());
    TITAN_CHECK(!block.mla, "layer {}: latent attention has no {} equivalent", i, family.architecture);
    if (block.delta_net) {
      const nn::GatedDeltaNetConfig& d = *block.delta_net;
      TITAN_CHECK(d.short_conv && d.output_gate && d.norm_eps == block.norm_eps,
                  "layer {}: a Gated DeltaNet without its short conv or output gate, or with a norm eps other than "
                  "the block's, has no {} equivalent",
                  i, family.architecture);
      if (!first_linear) first_linear = d;
      TITAN_CHECK(
          d.n_key_heads == first_linear->n_key_heads && d.n_value_heads == first_linear->n_value_heads &&
              d.key_head_dim == first_linear->key_head_dim && d.value_head_dim == first_linear->value_head_dim &&
              d.conv_kernel_size == first_linear->conv_kernel_size,
          "layer {}: its Gated DeltaNet differs from the first one's, which {} cannot express", i, family.architecture);
    }
    if (!family.joined_experts) {
      TITAN_CHECK(!block.moe, "layer {} is a mixture of experts, which {} has not", i, family.architecture);
      TITAN_CHECK(i == 0 || block.feed_forward.hidden_dim == hf.intermediate_size,
                  "dense layers of different widths have no {} equivalent", family.architecture);
      hf.intermediate_size = block.feed_forward.hidden_dim;
      continue;
    }
    TITAN_CHECK(block.moe.has_value(), "layer {} is dense, which {} has not (every layer is a mixture of experts)", i,
                family.architecture);
    const nn::MoEConfig& moe = *block.moe;
    TITAN_CHECK(moe.score == nn::RouterScore::softmax && moe.normalize_top_k && moe.route_scale == 1.0 &&
                    moe.num_expert_groups <= 1 && !moe.router_bias && !moe.expert_biases &&
                    moe.activation == nn::ExpertActivation::swiglu && moe.num_shared_experts >= 1 &&
                    moe.shared_expert_gate && moe.load_balance_coeff == 0.0,
                "layer {}: experts other than softmax top-k renormalised SwiGLU ones with a sigmoid-gated shared "
                "expert (no biases, groups, route scale or aux-loss-free bias) have no {} equivalent",
                i, family.architecture);
    TITAN_CHECK(first_moe == nullptr || (moe.num_experts == first_moe->num_experts && moe.top_k == first_moe->top_k &&
                                         moe.hidden_dim == first_moe->hidden_dim &&
                                         moe.num_shared_experts == first_moe->num_shared_experts &&
                                         moe.aux_loss_coef == first_moe->aux_loss_coef),
                "layer {}: its experts differ from layer 0's, which {} cannot express", i, family.architecture);
    first_moe = &moe;
  }
  if (first_linear) {
    m.conv_kernel_dim = first_linear->conv_kernel_size;
    m.key_head_dim = first_linear->key_head_dim;
    m.value_head_dim = first_linear->value_head_dim;
    m.num_key_heads = first_linear->n_key_heads;
    m.num_value_heads = first_linear->n_value_heads;
  }
  if (first_moe != nullptr) {
    hf.num_experts = first_moe->num_experts;
    hf.num_experts_per_tok = first_moe->top_k;
    hf.moe_intermediate_size = first_moe->hidden_dim;
    hf.norm_topk_prob = true;
    m.shared_expert_intermediate_size = first_moe->num_shared_experts * first_moe->hidden_dim;
    hf.output_router_logits = first_moe->aux_loss_coef > 0;
    if (first_moe->aux_loss_coef > 0) hf.router_aux_loss_coef = first_moe->aux_loss_coef;
    hf.intermediate_size = 0;
  }
  for (const nn::TransformerBlockConfig& block : config.layers) {
    TITAN_CHECK(block.delta_net || block.attention.output_gate,
                "a full-attention layer without the output gate has no {} equivalent", family.architecture);
  }
  TITAN_CHECK(!config.final_norm || (config.final_norm->weight_offset == family.norm_weight_offset &&
                                     config.final_norm->eps == config.layers.front().norm_eps),
              "a final norm other than 1 + w with rms_norm_eps has no {} equivalent", family.architecture);
  hf.linear_attention = m;
}

// The form of a Gated DeltaNet family that `config` is: the text form with experts where it has them.
const HfFamily& hybrid_form(const std::string& model_name, const DecoderConfig& config) {
  const bool experts = std::any_of(config.layers.begin(), config.layers.end(),
                                   [](const nn::TransformerBlockConfig& block) { return block.moe.has_value(); });
  for (const HfFamily& family : hf_families()) {
    if (family.model == model_name && family.text_model_type.empty() && family.joined_experts == experts) {
      return family;
    }
  }
  fail("model '{}' has no Hugging Face form {} experts", model_name, experts ? "with" : "without");
}

// gpt-oss's keys: every layer a mixture of experts in its form, all alike.
void describe_stacked_experts(const DecoderConfig& config, const HfFamily& family, HfConfig& hf) {
  const nn::MoEConfig* first = nullptr;
  for (int64_t i = 0; i < config.n_layers(); ++i) {
    const nn::TransformerBlockConfig& block = config.layers[static_cast<size_t>(i)];
    TITAN_CHECK(block.moe.has_value(), "layer {} is dense, which {} has not (every layer is a mixture of experts)", i,
                family.architecture);
    const nn::MoEConfig& moe = *block.moe;
    TITAN_CHECK(moe.score == nn::RouterScore::softmax && moe.normalize_top_k && moe.num_shared_experts == 0 &&
                    moe.route_scale == 1.0 && moe.num_expert_groups <= 1 && moe.router_bias && moe.expert_biases &&
                    moe.activation == nn::ExpertActivation::clamped_swiglu && moe.aux_loss_coef == 0.0,
                "layer {}: experts other than softmax-over-top-k routing with a router bias, expert biases and the "
                "clamped SwiGLU (no shared experts, groups, route scale or auxiliary loss) have no {} equivalent",
                i, family.architecture);
    TITAN_CHECK(first == nullptr || (moe.num_experts == first->num_experts && moe.top_k == first->top_k &&
                                     moe.hidden_dim == first->hidden_dim && moe.swiglu_alpha == first->swiglu_alpha &&
                                     moe.swiglu_limit == first->swiglu_limit),
                "layer {}: its experts differ from layer 0's, which {} cannot express", i, family.architecture);
    first = &moe;
  }
  hf.num_experts = first->num_experts;
  hf.num_experts_per_tok = first->top_k;
  hf.intermediate_size = first->hidden_dim;
  hf.moe_intermediate_size = first->hidden_dim;
  hf.norm_topk_prob = true;
  hf.swiglu_alpha = first->swiglu_alpha;
  hf.swiglu_limit = first->swiglu_limit;
}

void describe_experts(const DecoderConfig& config, const HfFamily& family, HfConfig& hf) {
  const nn::MoEConfig* first = nullptr;
  int64_t dense_width = 0;
  for (int64_t i = 0; i < config.n_layers(); ++i) {
    const nn::TransformerBlockConfig& block = config.layers[static_cast<size_t>(i)];
    if (!block.moe) {
      TITAN_CHECK(dense_width == 0 || dense_width == block.feed_forward.hidden_dim,
                  "dense layers of different widths ({} and {}) have no {} equivalent", dense_width,
                  block.feed_forward.hidden_dim, family.architecture);
      dense_width = block.feed_forward.hidden_dim;
      if (family.mixture_of_experts) hf.mlp_only_layers.push_back(i);
      continue;
    }
    TITAN_CHECK(family.mixture_of_experts, "layer {} is a mixture of experts, which {} has not", i,
                family.architecture);
    const nn::MoEConfig& moe = *block.moe;
    TITAN_CHECK(moe.score == nn::RouterScore::softmax && moe.num_shared_experts == 0 && moe.route_scale == 1.0,
                "layer {}: a sigmoid router, shared experts or a route scale have no {} equivalent", i,
                family.architecture);
    TITAN_CHECK(
        first == nullptr || (moe.num_experts == first->num_experts && moe.top_k == first->top_k &&
                             moe.hidden_dim == first->hidden_dim && moe.normalize_top_k == first->normalize_top_k &&
                             moe.aux_loss_coef == first->aux_loss_coef),
        "layer {}: its experts differ from the first MoE layer's, which {} cannot express", i, family.architecture);
    first = &moe;
  }
  if (dense_width > 0) hf.intermediate_size = dense_width;
  if (first == nullptr) return;
  hf.num_experts = first->num_experts;
  hf.num_experts_per_tok = first->top_k;
  hf.moe_intermediate_size = first->hidden_dim;
  hf.norm_topk_prob = first->normalize_top_k;
  hf.decoder_sparse_step = 1;
  hf.output_router_logits = first->aux_loss_coef > 0;
  if (first->aux_loss_coef > 0) hf.router_aux_loss_coef = first->aux_loss_coef;
}

}  // namespace

namespace {

std::string pattern_string(const std::vector<bool>& sliding) {
  std::string text;
  for (bool s : sliding) text += s ? 'S' : 'G';
  return text;
}

// What every layer's attention and block must share, and what the family
// fixes, checked against layer 0; the window is collected and checked apart.
void check_layers(const DecoderConfig& config, const HfFamily& family, const std::string& model_name) {
  const std::string& architecture = family.architecture;
  const double norm_offset = family.norm_weight_offset;
  const nn::TransformerBlockConfig& first = config.layers.front();
  const auto& a = first.attention;
  for (int64_t i = 0; i < config.n_layers(); ++i) {
    const nn::TransformerBlockConfig& block = config.layers[static_cast<size_t>(i)];
    const auto& b = block.attention;
    const auto require = [&](bool ok, const char* what) {
      TITAN_CHECK(ok, "this {} model's layer {}: {} has no {} equivalent", model_name, i, what, architecture);
    };
    require(b.n_heads == a.n_heads && b.kv_heads() == a.kv_heads() && b.head_size() == a.head_size() &&
                block.norm_eps == first.norm_eps && b.scale_dim == a.scale_dim && b.logit_softcap == a.logit_softcap &&
                b.norm_eps == a.norm_eps,
            "attention different from layer 0's (heads, head size, norm eps, score scale or soft-cap)");
    require(b.rotary_size() == a.rotary_size(), "a rotary width different from layer 0's");
    require((b.rope || family.gated_attention) && b.rope_style == family.rope_style,
            "its RoPE pairing (or a layer without RoPE)");
    require(b.qk_norm == family.qk_norm, b.qk_norm ? "a q/k norm" : "no q/k norm");
    const double qk_offset = family.gated_attention ? 0.0 : norm_offset;
    require(!b.qk_norm || (b.qk_norm_whole_projection == family.qk_norm_whole_projection &&
                           b.qk_norm_weight_offset == qk_offset && b.norm_eps == block.norm_eps &&
                           b.qk_norm_learnable == !family.gated_attention),
            "its kind of q/k norm (per head or whole projection, with or without a scale, weight offset, or an eps "
            "other than the block's)");
    require(b.query_scale == a.query_scale && (family.gated_attention || b.query_scale == 1.0),
            "a query scale (or one different from layer 0's)");
    require(b.output_gate == (family.gated_attention || family.gated_delta_net),
            b.output_gate ? "an attention output gate" : "no output gate");
    require(block.post_norm_eps == first.post_norm_eps &&
                (family.gated_attention || block.post_norm_eps == 0.0 || block.post_norm_eps == block.norm_eps),
            "a post-norm eps of its own (or one different from layer 0's)");
    require(b.qkv_bias == family.qkv_bias, b.qkv_bias ? "q/k/v biases" : "q/k/v projections without biases");
    require(b.output_bias == family.stacked_experts, b.output_bias ? "an output bias" : "no output bias");
    require(b.sinks == family.stacked_experts, b.sinks ? "attention sinks" : "no attention sinks");
    require(block.norm_weight_offset == norm_offset, "its norm weight offset");
    require(block.pre_norms == (family.norms != HfNorms::post) && block.post_norms == (family.norms != HfNorms::pre),
            "its placement of norms (before and/or after the sublayers)");
    require(block.moe || block.feed_forward.activation == gate(family), "its feed-forward activation");
    require(b.local_rope == (family.local_rope && b.sliding_window > 0),
            "its choice of RoPE table (local RoPE goes with sliding layers)");
    require(family.score_scale_and_softcaps || b.scale_dim == 0.0 || b.scale_dim == static_cast<double>(b.head_size()),
            "a score scale other than head_dim^-1/2");
    require(family.score_scale_and_softcaps || b.logit_softcap == 0.0f, "attention logit soft-capping");
  }
}

// The window and which layers slide, as the family's rule must give them.
void describe_sliding(const DecoderConfig& config, const HfFamily& family, HfConfig& hf) {
  const int64_t n = config.n_layers();
  int64_t window = 0;
  std::vector<bool> sliding;
  for (const nn::TransformerBlockConfig& block : config.layers) {
    const int64_t w = block.attention.sliding_window;
    TITAN_CHECK(w == 0 || window == 0 || w == window,
                "layers with different windows ({} and {}) have no {} equivalent (it has one sliding_window)", window,
                w, family.architecture);
    if (w > 0) window = w;
    sliding.push_back(w > 0);
  }
  hf.sliding_window = window;
  hf.sliding_layers = window > 0 ? sliding : std::vector<bool>{};
  if (family.sliding == HfSlidingLayers::pattern) {
    // Layer i is global iff (i + 1) % pattern == 0: the first global layer says the pattern (none: n + 1).
    int64_t first_global = n;
    for (int64_t i = 0; i < n && first_global == n; ++i) {
      if (!sliding[static_cast<size_t>(i)]) first_global = i;
    }
    hf.sliding_window_pattern = first_global + 1;
    // Every layer global still needs a window in config.json; it is never used.
    if (window == 0) {
      hf.sliding_window = family.defaults.sliding_window;
      hf.sliding_layers = sliding;
    }
  }
  if (window == 0 && family.sliding != HfSlidingLayers::even) return;
  TITAN_CHECK(family.sliding != HfSlidingLayers::none, "sliding-window attention has no {} equivalent",
              family.architecture);
  // Its layer_types is always written, and transformers reads any pattern from it.
  if (family.sliding == HfSlidingLayers::every_fourth_from_last) return;
  const std::vector<bool> rule = hf_sliding_rule(family, n, hf.sliding_window_pattern);
  TITAN_CHECK(sliding == rule,
              "layers that slide as {} (S: sliding, G: global) have no {} equivalent: its layers slide as {}",
              pattern_string(sliding), family.architecture, pattern_string(rule));
}

// The model-level parts of gated attention (Muse Glimmer): its embedding norm,
// final norm, output multiplier and soft-cap, which other families must not have.
void check_gated_attention_model(const DecoderConfig& config, const HfFamily& family, double norm_eps) {
  if (!family.gated_attention) {
    TITAN_CHECK(config.embedding_norm_eps == 0.0, "an embedding norm has no {} equivalent", family.architecture);
    TITAN_CHECK(config.output_multiplier == 1.0, "an output multiplier ({}) has no {} equivalent",
                config.output_multiplier, family.architecture);
    return;
  }
  TITAN_CHECK(config.embedding_norm_eps == norm_eps,
              "an embedding norm eps of {} (none if 0) has no {} equivalent: it norms embeddings with rms_norm_eps {}",
              config.embedding_norm_eps, family.architecture, norm_eps);
  TITAN_CHECK(config.final_norm && config.final_norm->learnable && config.final_norm->weight_offset == 0.0 &&
                  config.final_norm->eps == norm_eps,
              "a final norm other than one scaling by w itself with rms_norm_eps {} has no {} equivalent", norm_eps,
              family.architecture);
  TITAN_CHECK(config.loss.softcap > 0.0f,
              "logits without a soft-cap have no {} equivalent (it always applies final_logit_softcapping)",
              family.architecture);
}

}  // namespace

HfConfig hf_config_from_decoder(const std::string& model_name, const DecoderConfig& config, DType dtype) {
  const HfFamily& family = hf_family_for_model(model_name).gated_delta_net ? hybrid_form(model_name, config)
                                                                           : hf_family_for_model(model_name);
  TITAN_CHECK(config.n_layers() > 0, "a model without layers has no {} equivalent", family.architecture);
  TITAN_CHECK(config.mtp_layers.empty() || family.latent_attention,
              "multi-token prediction layers (model.num_mtp_layers) have no {} equivalent", family.architecture);
  check_layers(config, family, model_name);
  const auto& a = config.layers.front().attention;
  // config.json has one max_position_embeddings: dynamic scaling starts growing its base there.
  TITAN_CHECK(config.rope_scaling.type != ops::RopeScalingType::dynamic ||
                  config.rope_scaling.original_max_position == config.max_seq_len,
              "dynamic RoPE scaling from {} positions with max_seq_len {} has no {} equivalent (transformers grows "
              "the base past max_position_embeddings, which titan writes as max_seq_len)",
              config.rope_scaling.original_max_position, config.max_seq_len, family.architecture);
  const int64_t rotary = a.rotary_size(), head = a.head_size();
  const double rotary_fraction = static_cast<double>(rotary) / static_cast<double>(head);
  TITAN_CHECK(rotary == head || (family.partial_rotary &&
                                 static_cast<int64_t>(static_cast<double>(head) * rotary_fraction) == rotary),
              "rotating {} of {} features per head has no {} equivalent{}", rotary, head, family.architecture,
              family.partial_rotary ? " (no partial_rotary_factor gives it)" : " (it rotates whole heads)");
  const double norm_eps = config.layers.front().norm_eps;
  TITAN_CHECK(!a.qk_norm || a.norm_eps == norm_eps,
              "q/k norm eps {} differs from the layer norm eps {}: {} has one rms_norm_eps", a.norm_eps, norm_eps,
              family.architecture);
  const double dim_root = std::sqrt(static_cast<double>(config.dim()));
  TITAN_CHECK(family.scaled_embeddings ? std::abs(config.embedding_scale - dim_root) <= 1e-9 * dim_root
                                       : config.embedding_scale == 0.0,
              "embeddings scaled by {} have no {} equivalent ({})", config.embedding_scale, family.architecture,
              family.scaled_embeddings ? "it scales them by sqrt(hidden_size)" : "it does not scale them");
  TITAN_CHECK(family.score_scale_and_softcaps || family.gated_attention || config.loss.softcap == 0.0f,
              "final logit soft-capping has no {} equivalent", family.architecture);
  check_gated_attention_model(config, family, norm_eps);
  TITAN_CHECK(family.local_rope || config.local_rope_theta == 0.0,
              "a second RoPE table (local_rope_theta {}) has no {} equivalent", config.local_rope_theta,
              family.architecture);
  HfConfig hf = family.defaults;
  hf.architecture = family.architecture;
  hf.model_type = family.model_type;
  hf.hidden_size = config.dim();
  if (family.latent_attention) {
    describe_latent_attention(config, family, hf);
  } else if (family.stacked_experts) {
    describe_stacked_experts(config, family, hf);
  } else if (family.gated_delta_net) {
    describe_linear_attention(config, family, hf);
  } else {
    TITAN_CHECK(!config.layers.front().mla, "latent attention has no {} equivalent", family.architecture);
    describe_experts(config, family, hf);
  }
  describe_sliding(config, family, hf);
  hf.num_hidden_layers = config.n_layers();
  hf.num_attention_heads = a.n_heads;
  hf.num_key_value_heads = a.kv_heads();  // latent attention: every head its own (num_attention_heads)
  hf.head_dim = a.head_size();
  hf.vocab_size = config.vocab_size;
  hf.max_position_embeddings = config.max_seq_len;
  hf.rms_norm_eps = norm_eps;
  hf.rope_theta = config.rope_theta;
  hf.rope_scaling = config.rope_scaling;
  hf.partial_rotary_factor = rotary_fraction;
  hf.tie_word_embeddings = config.tie_embeddings;
  if (family.score_scale_and_softcaps) {
    hf.query_pre_attn_scalar = a.scale_dim > 0 ? a.scale_dim : static_cast<double>(a.head_size());
    hf.attn_logit_softcapping = a.logit_softcap;
    hf.final_logit_softcapping = config.loss.softcap;
  }
  if (family.local_rope && config.local_rope_theta > 0) hf.rope_local_base_freq = config.local_rope_theta;
  if (family.gated_attention) {
    hf.qk_scale_factor = a.query_scale;
    hf.output_multiplier = config.output_multiplier;
    const double post_eps = config.layers.front().post_norm_eps;
    hf.post_norm_eps = post_eps > 0 ? post_eps : norm_eps;
    hf.final_logit_softcapping = config.loss.softcap;
    hf.nope_layers.clear();
    for (const nn::TransformerBlockConfig& block : config.layers) hf.nope_layers.push_back(!block.attention.rope);
  }
  hf.torch_dtype = hf_dtype_name(dtype);
  return hf;
}

}  // namespace titan::models
