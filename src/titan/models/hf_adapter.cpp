#include "titan/models/hf_adapter.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace titan::models {

DecoderConfig decoder_config_from_hf(const HfConfig& hf) {
  const HfFamily& family = hf_family(hf);
  DecoderConfig config;
  config.vocab_size = hf.vocab_size;
  const int64_t implied_head_dim = hf.hidden_size / hf.num_attention_heads;
  for (int64_t i = 0; i < hf.num_hidden_layers; ++i) {
    nn::TransformerBlockConfig block;
    block.attention = {.dim = hf.hidden_size,
                       .n_heads = hf.num_attention_heads,
                       .n_kv_heads = hf.num_key_value_heads > 0 ? hf.num_key_value_heads : hf.num_attention_heads,
                       // Left 0 when implied, as titan's own flavors leave it.
                       .head_dim = hf.head_dim > 0 && hf.head_dim != implied_head_dim ? hf.head_dim : 0,
                       .qk_norm = family.qk_norm,
                       .norm_eps = hf.rms_norm_eps,
                       .rope_style = family.rope_style};
    block.norm_eps = hf.rms_norm_eps;
    // Hugging Face's rule (Qwen3MoeDecoderLayer): MoE unless listed dense, every decoder_sparse_step-th layer.
    const bool dense_only =
        std::find(hf.mlp_only_layers.begin(), hf.mlp_only_layers.end(), i) != hf.mlp_only_layers.end();
    if (family.mixture_of_experts && !dense_only && hf.num_experts > 0 && (i + 1) % hf.decoder_sparse_step == 0) {
      block.moe = nn::MoEConfig{.dim = hf.hidden_size,
                                .hidden_dim = hf.moe_intermediate_size,
                                .num_experts = hf.num_experts,
                                .top_k = hf.num_experts_per_tok,
                                .normalize_top_k = hf.norm_topk_prob,
                                .aux_loss_coef = hf.output_router_logits ? hf.router_aux_loss_coef : 0.0};
    } else {
      block.feed_forward = {.dim = hf.hidden_size, .hidden_dim = hf.intermediate_size};
    }
    config.layers.push_back(block);
  }
  config.rope_theta = hf.rope_theta;
  config.rope_scaling = hf.rope_scaling;
  config.tie_embeddings = hf.tie_word_embeddings;
  config.max_seq_len = hf.max_position_embeddings;
  return config;
}

namespace {

// The MoE layers' shared settings, and the dense layers among them (Hugging
// Face says which layers are dense by listing them, with decoder_sparse_step 1).
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

HfConfig hf_config_from_decoder(const std::string& model_name, const DecoderConfig& config, DType dtype) {
  const HfFamily& family = hf_family_for_model(model_name);
  TITAN_CHECK(config.n_layers() > 0, "a model without layers has no {} equivalent", family.architecture);
  const auto& a = config.layers.front().attention;
  for (const nn::TransformerBlockConfig& block : config.layers) {
    const auto& b = block.attention;
    TITAN_CHECK(b.n_heads == a.n_heads && b.kv_heads() == a.kv_heads() && b.head_size() == a.head_size() &&
                    b.rope == a.rope && b.sliding_window == a.sliding_window &&
                    block.norm_eps == config.layers.front().norm_eps,
                "layers with different attention have no {} equivalent", family.architecture);
  }
  TITAN_CHECK(a.rope_style == family.rope_style && a.qk_norm == family.qk_norm && a.rope,
              "this {} model (RoPE pairing or q/k norm changed) has no {} equivalent", model_name, family.architecture);
  TITAN_CHECK(config.rope_scaling.factor <= 0 || family.llama3_rope_scaling,
              "{} has no llama3 RoPE scaling; this {} model uses it", family.architecture, model_name);
  const double norm_eps = config.layers.front().norm_eps;
  TITAN_CHECK(!a.qk_norm || a.norm_eps == norm_eps,
              "q/k norm eps {} differs from the layer norm eps {}: {} has one rms_norm_eps", a.norm_eps, norm_eps,
              family.architecture);
  TITAN_CHECK(a.sliding_window == 0, "sliding-window attention has no {} equivalent", family.architecture);
  HfConfig hf = family.defaults;
  hf.architecture = family.architecture;
  hf.model_type = family.model_type;
  hf.hidden_size = config.dim();
  describe_experts(config, family, hf);
  hf.num_hidden_layers = config.n_layers();
  hf.num_attention_heads = a.n_heads;
  hf.num_key_value_heads = a.kv_heads();
  hf.head_dim = a.head_size();
  hf.vocab_size = config.vocab_size;
  hf.max_position_embeddings = config.max_seq_len;
  hf.rms_norm_eps = norm_eps;
  hf.rope_theta = config.rope_theta;
  hf.rope_scaling = config.rope_scaling;
  hf.tie_word_embeddings = config.tie_embeddings;
  hf.torch_dtype = hf_dtype_name(dtype);
  return hf;
}

namespace {

struct NamePair {
  const char* titan;
  const char* hf;
};
// Per-layer names after "layers.N." / "model.layers.N.".
constexpr NamePair kLayerNames[] = {
    {"attention.wq.weight", "self_attn.q_proj.weight"},     {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},     {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"attention.q_norm.weight", "self_attn.q_norm.weight"}, {"attention.k_norm.weight", "self_attn.k_norm.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},     {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},       {"attention_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"}, {"moe.router.gate.weight", "mlp.gate.weight"},
};
// A MoE layer's experts: one titan tensor [E, ...] per projection, one HF tensor per expert.
constexpr NamePair kExpertNames[] = {
    {"moe.experts.w1", "gate_proj.weight"},
    {"moe.experts.w2", "down_proj.weight"},
    {"moe.experts.w3", "up_proj.weight"},
};
constexpr NamePair kTopNames[] = {
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// Maps "<prefix><layer>.<suffix>" through kLayerNames (from -> to); "" if no match.
// The layer number must be canonical ("3", not "03") so the mapping stays one-to-one.
std::string map_layer_name(const std::string& name, const std::string& from_prefix, const std::string& to_prefix,
                           bool to_hf) {
  if (name.rfind(from_prefix, 0) != 0) return "";
  const size_t digits_begin = from_prefix.size();
  size_t digits_end = digits_begin;
  while (digits_end < name.size() && name[digits_end] >= '0' && name[digits_end] <= '9') ++digits_end;
  if (digits_end == digits_begin || digits_end >= name.size() || name[digits_end] != '.') return "";
  if (name[digits_begin] == '0' && digits_end - digits_begin > 1) return "";
  const std::string suffix = name.substr(digits_end + 1);
  for (const NamePair& pair : kLayerNames) {
    if (suffix == (to_hf ? pair.titan : pair.hf)) {
      return to_prefix + name.substr(digits_begin, digits_end - digits_begin) + "." + (to_hf ? pair.hf : pair.titan);
    }
  }
  return "";
}

struct PermutedHeads {
  int64_t heads, head_dim;
};

// Rows of one q/k projection (or the head_dim entries of a q/k norm) of the
// layer `titan_name` belongs to form `heads` groups of head_dim; nullopt when
// the tensor is not permuted (not a q/k tensor, or a half-rotation layer).
std::optional<PermutedHeads> permuted_heads(const std::string& titan_name, const DecoderConfig& config) {
  if (!titan_name.starts_with("layers.")) return std::nullopt;
  const int64_t layer = std::atoll(titan_name.c_str() + 7);
  if (layer < 0 || layer >= config.n_layers()) return std::nullopt;
  const auto& a = config.layers[static_cast<size_t>(layer)].attention;
  if (a.rope_style != ops::RopeStyle::interleaved || !a.rope) return std::nullopt;
  auto ends_with = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return titan_name.size() >= n && titan_name.compare(titan_name.size() - n, n, suffix) == 0;
  };
  if (ends_with("attention.wq.weight")) return PermutedHeads{a.n_heads, a.head_size()};
  if (ends_with("attention.wk.weight")) return PermutedHeads{a.kv_heads(), a.head_size()};
  if (ends_with("attention.q_norm.weight") || ends_with("attention.k_norm.weight")) {
    return PermutedHeads{1, a.head_size()};
  }
  return std::nullopt;
}

// out row r = in row source(r), where a head's HF row j < D/2 holds its
// interleaved row 2j and HF row D/2 + j holds row 2j + 1.
Tensor permute_head_rows(const std::string& titan_name, const Tensor& tensor, int64_t heads, int64_t head_dim,
                         bool to_hf) {
  TITAN_CHECK(tensor.dim() >= 1 && tensor.size(0) == heads * head_dim,
              "tensor '{}' of shape {}: expected {} rows ({} heads x head_dim {})", titan_name,
              shape_str(tensor.shape()), heads * head_dim, heads, head_dim);
  const Tensor in = tensor.to(Device::cpu()).contiguous();
  Tensor out = Tensor::empty(in.shape(), in.dtype());
  const size_t row_bytes = in.nbytes() / static_cast<size_t>(in.size(0));
  const auto* src = static_cast<const char*>(in.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < head_dim; ++j) {
      const int64_t interleaved = j < half ? 2 * j : 2 * (j - half) + 1;  // HF row j of this head
      const int64_t hf_row = h * head_dim + j, titan_row = h * head_dim + interleaved;
      const int64_t out_row = to_hf ? hf_row : titan_row, in_row = to_hf ? titan_row : hf_row;
      std::memcpy(dst + static_cast<size_t>(out_row) * row_bytes, src + static_cast<size_t>(in_row) * row_bytes,
                  row_bytes);
    }
  }
  return out;
}

}  // namespace

namespace {

// Reads canonical decimal digits of `text` at `at` ("3", not "03"); -1 when there are none.
int64_t read_index(const std::string& text, size_t& at) {
  const size_t begin = at;
  int64_t value = 0;
  while (at < text.size() && text[at] >= '0' && text[at] <= '9' && at - begin < 12)
    value = value * 10 + (text[at++] - '0');
  if (at == begin || (text[begin] == '0' && at - begin > 1)) return -1;
  return value;
}

bool consume(const std::string& text, size_t& at, const std::string& expected) {
  if (text.compare(at, expected.size(), expected) != 0) return false;
  at += expected.size();
  return true;
}

}  // namespace

std::string hf_expert_tensor_name(const std::string& titan_name, int64_t expert) {
  size_t at = 0;
  if (!consume(titan_name, at, "layers.")) return "";
  const int64_t layer = read_index(titan_name, at);
  if (layer < 0 || !consume(titan_name, at, ".")) return "";
  for (const NamePair& pair : kExpertNames) {
    if (titan_name.compare(at, std::string::npos, pair.titan) == 0) {
      return fmt::format("model.layers.{}.mlp.experts.{}.{}", layer, expert, pair.hf);
    }
  }
  return "";
}

std::optional<std::pair<std::string, int64_t>> titan_expert_tensor(const std::string& hf_name) {
  size_t at = 0;
  if (!consume(hf_name, at, "model.layers.")) return std::nullopt;
  const int64_t layer = read_index(hf_name, at);
  if (layer < 0 || !consume(hf_name, at, ".mlp.experts.")) return std::nullopt;
  const int64_t expert = read_index(hf_name, at);
  if (expert < 0 || !consume(hf_name, at, ".")) return std::nullopt;
  for (const NamePair& pair : kExpertNames) {
    if (hf_name.compare(at, std::string::npos, pair.hf) == 0) {
      return std::make_pair(fmt::format("layers.{}.{}", layer, pair.titan), expert);
    }
  }
  return std::nullopt;
}

std::string hf_tensor_name(const std::string& titan_name) {
  for (const NamePair& pair : kTopNames) {
    if (titan_name == pair.titan) return pair.hf;
  }
  return map_layer_name(titan_name, "layers.", "model.layers.", true);
}

std::string titan_tensor_name(const std::string& hf_name) {
  for (const NamePair& pair : kTopNames) {
    if (hf_name == pair.hf) return pair.titan;
  }
  return map_layer_name(hf_name, "model.layers.", "layers.", false);
}

bool hf_tensor_ignored(const std::string& hf_name, const DecoderConfig& config) {
  const std::string inv_freq = "rotary_emb.inv_freq";
  const bool rope_buffer = hf_name.size() >= inv_freq.size() &&
                           hf_name.compare(hf_name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0;
  return rope_buffer || (config.tie_embeddings && hf_name == "lm_head.weight");
}

Tensor to_hf_layout(const std::string& titan_name, const Tensor& tensor, const DecoderConfig& config) {
  const auto heads = permuted_heads(titan_name, config);
  if (!heads) return tensor;
  return permute_head_rows(titan_name, tensor, heads->heads, heads->head_dim, true);
}

Tensor from_hf_layout(const std::string& titan_name, const Tensor& tensor, const DecoderConfig& config) {
  const auto heads = permuted_heads(titan_name, config);
  if (!heads) return tensor;
  return permute_head_rows(titan_name, tensor, heads->heads, heads->head_dim, false);
}

}  // namespace titan::models
