#include "titan/models/hf/hf_tensor_names.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "titan/core/copy.h"

namespace titan::models {

namespace {

// A per-layer tensor (after "layers.N." / "model.layers.N."): titan's name, and
// the HF tensor holding it as rows `part` of `parts` equal-purpose pieces.
struct LayerName {
  const char* titan;
  const char* hf;
  int part = 0;
  int parts = 1;
};

// The per-layer names of `family`'s models; which norms a block has and
// whether q/k/v and gate/up are fused decide them.
std::vector<LayerName> layer_names(const HfFamily& family) {
  std::vector<LayerName> names;
  if (family.latent_attention) {
    // DeepseekV3Attention: a direct (q_proj) or low-rank query, the latent
    // with the shared rotary key (kv_a_proj_with_mqa) and their norms.
    names.push_back({"attention.wq.weight", "self_attn.q_proj.weight"});
    names.push_back({"attention.wq_a.weight", "self_attn.q_a_proj.weight"});
    names.push_back({"attention.q_norm.weight", "self_attn.q_a_layernorm.weight"});
    names.push_back({"attention.wq_b.weight", "self_attn.q_b_proj.weight"});
    names.push_back({"attention.wkv_a.weight", "self_attn.kv_a_proj_with_mqa.weight"});
    names.push_back({"attention.kv_norm.weight", "self_attn.kv_a_layernorm.weight"});
    names.push_back({"attention.wkv_b.weight", "self_attn.kv_b_proj.weight"});
    names.push_back({"moe.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"});
    names.push_back({"moe.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"});
    names.push_back({"moe.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"});
    names.push_back({"feed_forward.w1.weight", "mlp.gate_proj.weight"});
    names.push_back({"feed_forward.w3.weight", "mlp.up_proj.weight"});
    // The aux-loss-free bias (a buffer): transformers' score correction bias, in the choice only.
    names.push_back({"moe.expert_bias", "mlp.gate.e_score_correction_bias"});
    // A multi-token prediction layer's fusion (DeepSeek's eh_proj, enorm,
    // hnorm) and the norm before its shared head (TorchTitan's mtp_norm).
    names.push_back({"enorm.weight", "enorm.weight"});
    names.push_back({"hnorm.weight", "hnorm.weight"});
    names.push_back({"eh_proj.weight", "eh_proj.weight"});
    names.push_back({"mtp_norm.weight", "shared_head.norm.weight"});
  } else if (family.fused_projections) {
    names.push_back({"attention.wq.weight", "self_attn.qkv_proj.weight", 0, 3});
    names.push_back({"attention.wk.weight", "self_attn.qkv_proj.weight", 1, 3});
    names.push_back({"attention.wv.weight", "self_attn.qkv_proj.weight", 2, 3});
    names.push_back({"feed_forward.w1.weight", "mlp.gate_up_proj.weight", 0, 2});
    names.push_back({"feed_forward.w3.weight", "mlp.gate_up_proj.weight", 1, 2});
  } else {
    // Qwen3.5's q_proj also holds the output gate (kJoinedTensors).
    if (!family.gated_delta_net) names.push_back({"attention.wq.weight", "self_attn.q_proj.weight"});
    names.push_back({"attention.wk.weight", "self_attn.k_proj.weight"});
    names.push_back({"attention.wv.weight", "self_attn.v_proj.weight"});
    names.push_back({"feed_forward.w1.weight", "mlp.gate_proj.weight"});
    names.push_back({"feed_forward.w3.weight", "mlp.up_proj.weight"});
  }
  names.push_back({"attention.wo.weight", "self_attn.o_proj.weight"});
  names.push_back({"feed_forward.w2.weight", "mlp.down_proj.weight"});
  if (family.gated_attention) names.push_back({"attention.o_gate.weight", "self_attn.gate_proj.weight"});
  if (family.qkv_bias) {
    names.push_back({"attention.wq.bias", "self_attn.q_proj.bias"});
    names.push_back({"attention.wk.bias", "self_attn.k_proj.bias"});
    names.push_back({"attention.wv.bias", "self_attn.v_proj.bias"});
  }
  if (family.qk_norm) {
    names.push_back({"attention.q_norm.weight", "self_attn.q_norm.weight"});
    names.push_back({"attention.k_norm.weight", "self_attn.k_norm.weight"});
  }
  switch (family.norms) {
    case HfNorms::pre:
      names.push_back({"attention_norm.weight", "input_layernorm.weight"});
      names.push_back({"ffn_norm.weight", "post_attention_layernorm.weight"});
      break;
    case HfNorms::pre_and_post:
      // HF's post_attention_layernorm is the norm *after* attention here, not the pre-FFN norm as in Llama.
      names.push_back({"attention_norm.weight", "input_layernorm.weight"});
      names.push_back({"post_attention_norm.weight", "post_attention_layernorm.weight"});
      names.push_back({"ffn_norm.weight", "pre_feedforward_layernorm.weight"});
      names.push_back({"post_ffn_norm.weight", "post_feedforward_layernorm.weight"});
      break;
    case HfNorms::post:
      names.push_back({"post_attention_norm.weight", "post_attention_layernorm.weight"});
      names.push_back({"post_ffn_norm.weight", "post_feedforward_layernorm.weight"});
      break;
  }
  if (family.mixture_of_experts) names.push_back({"moe.router.gate.weight", "mlp.gate.weight"});
  if (family.gated_delta_net) {
    // Qwen3_5GatedDeltaNet (its conv1d and the q_proj of full attention: kJoinedTensors).
    names.push_back({"attention.in_proj_q.weight", "linear_attn.in_proj_qkv.weight", 0, 3});
    names.push_back({"attention.in_proj_k.weight", "linear_attn.in_proj_qkv.weight", 1, 3});
    names.push_back({"attention.in_proj_v.weight", "linear_attn.in_proj_qkv.weight", 2, 3});
    names.push_back({"attention.in_proj_z.weight", "linear_attn.in_proj_z.weight"});
    names.push_back({"attention.in_proj_b.weight", "linear_attn.in_proj_b.weight"});
    names.push_back({"attention.in_proj_a.weight", "linear_attn.in_proj_a.weight"});
    names.push_back({"attention.A_log", "linear_attn.A_log"});
    names.push_back({"attention.dt_bias", "linear_attn.dt_bias"});
    names.push_back({"attention.norm", "linear_attn.norm.weight"});
    names.push_back({"attention.out_proj.weight", "linear_attn.out_proj.weight"});
  }
  if (family.joined_experts) {
    // Qwen3_5MoeSparseMoeBlock: router, shared expert and its gate; down_proj is titan's w2 as it is.
    names.push_back({"moe.router.gate.weight", "mlp.gate.weight"});
    names.push_back({"moe.shared_experts.w1.weight", "mlp.shared_expert.gate_proj.weight"});
    names.push_back({"moe.shared_experts.w3.weight", "mlp.shared_expert.up_proj.weight"});
    names.push_back({"moe.shared_experts.w2.weight", "mlp.shared_expert.down_proj.weight"});
    names.push_back({"moe.shared_expert_gate.weight", "mlp.shared_expert_gate.weight"});
    names.push_back({"moe.experts.w2", "mlp.experts.down_proj"});
  }
  if (family.stacked_experts) {
    // GptOssAttention's o_proj bias and sinks, GptOssTopKRouter (its experts: kStackedExperts).
    names.push_back({"attention.wq.bias", "self_attn.q_proj.bias"});
    names.push_back({"attention.wk.bias", "self_attn.k_proj.bias"});
    names.push_back({"attention.wv.bias", "self_attn.v_proj.bias"});
    names.push_back({"attention.wo.bias", "self_attn.o_proj.bias"});
    names.push_back({"attention.sinks", "self_attn.sinks"});
    names.push_back({"moe.router.gate.weight", "mlp.router.weight"});
    names.push_back({"moe.router.gate.bias", "mlp.router.bias"});
  }
  return names;
}

// gpt-oss's experts (HfFamily::stacked_experts): one HF tensor per
// projection and its bias, made of titan's stacked tensors.
struct StackedExperts {
  const char* hf;
  HfTensorLayout layout;
  const char* first;
  const char* second;  // null for one part
};
constexpr StackedExperts kStackedExperts[] = {
    {"mlp.experts.gate_up_proj", HfTensorLayout::experts_interleaved, "moe.experts.w1", "moe.experts.w3"},
    {"mlp.experts.gate_up_proj_bias", HfTensorLayout::experts_interleaved, "moe.experts.b1", "moe.experts.b3"},
    {"mlp.experts.down_proj", HfTensorLayout::experts_transposed, "moe.experts.w2", nullptr},
    {"mlp.experts.down_proj_bias", HfTensorLayout::experts_transposed, "moe.experts.b2", nullptr},
};

// Qwen3.5's HF tensors joined from several titan tensors in a layout of
// their own (HfFamily::gated_delta_net; gate_up_proj with joined_experts).
struct JoinedTensor {
  const char* hf;
  HfTensorLayout layout;
  std::vector<const char*> parts;
  bool experts;  // needs HfFamily::joined_experts
};
const std::vector<JoinedTensor>& joined_tensors() {
  static const std::vector<JoinedTensor> table{
      {"self_attn.q_proj.weight",
       HfTensorLayout::blocks_interleaved,
       {"attention.wq.weight", "attention.o_gate.weight"},
       false},
      {"linear_attn.conv1d.weight",
       HfTensorLayout::depthwise_conv,
       {"attention.conv_q", "attention.conv_k", "attention.conv_v"},
       false},
      {"mlp.experts.gate_up_proj", HfTensorLayout::blocks_interleaved, {"moe.experts.w1", "moe.experts.w3"}, true},
  };
  return table;
}

// A MoE layer's experts: one titan tensor [E, ...] per projection, one HF tensor per expert.
struct NamePair {
  const char* titan;
  const char* hf;
};
constexpr NamePair kExpertNames[] = {
    {"moe.experts.w1", "gate_proj.weight"},
    {"moe.experts.w2", "down_proj.weight"},
    {"moe.experts.w3", "up_proj.weight"},
};
// The model-level tensors; the first two after the family's weights_prefix.
constexpr NamePair kTopNames[] = {
    {"tok_embeddings.weight", "embed_tokens.weight"},
    {"norm.weight", "norm.weight"},
    {"output.weight", "lm_head.weight"},
};
std::string top_hf_name(const HfFamily& family, const NamePair& pair) {
  const std::string name = pair.hf;
  return name == "lm_head.weight" ? name : family.weights_prefix + name;
}

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

// Splits "<prefix><layer>.<suffix>" into layer and suffix; nullopt if `name` has no such form.
std::optional<std::pair<int64_t, std::string>> split_layer_name(const std::string& name, const std::string& prefix) {
  size_t at = 0;
  if (!consume(name, at, prefix)) return std::nullopt;
  const int64_t layer = read_index(name, at);
  if (layer < 0 || !consume(name, at, ".")) return std::nullopt;
  return std::make_pair(layer, name.substr(at));
}

// The per-layer entry of `titan_name` and its layer; nullopt for a name the family has not.
std::optional<std::pair<int64_t, LayerName>> find_layer_name(const HfFamily& family, const std::string& titan_name) {
  const auto split = split_layer_name(titan_name, "layers.");
  if (!split) return std::nullopt;
  for (const LayerName& entry : layer_names(family)) {
    if (split->second == entry.titan) return std::make_pair(split->first, entry);
  }
  return std::nullopt;
}

struct PermutedHeads {
  int64_t heads, head_dim;
};

// Rows of one q/k projection (or the entries of a q/k norm) of the layer
// `titan_name` belongs to form `heads` groups of head_dim; nullopt when the
// tensor is not permuted (not a q/k tensor, or a half-rotation layer).
std::optional<PermutedHeads> permuted_heads(const std::string& titan_name, const DecoderConfig& config) {
  if (!titan_name.starts_with("layers.")) return std::nullopt;
  const int64_t layer = std::atoll(titan_name.c_str() + 7);
  if (layer < 0 || layer >= config.n_layers()) return std::nullopt;
  const auto& a = config.layers[static_cast<size_t>(layer)].attention;
  // NoPE layers too: the same permutation of q and k leaves their scores as
  // they are, and TorchTitan's adapters permute every layer, so the files match theirs.
  if (a.rope_style != ops::RopeStyle::interleaved) return std::nullopt;
  // Latent attention: transformers' rope_interleave rotates the pairs as titan does, rows as they are.
  if (config.layers[static_cast<size_t>(layer)].mla) return std::nullopt;
  if (titan_name.ends_with("attention.wq.weight") || titan_name.ends_with("attention.wq.bias")) {
    return PermutedHeads{a.n_heads, a.head_size()};
  }
  if (titan_name.ends_with("attention.wk.weight") || titan_name.ends_with("attention.wk.bias")) {
    return PermutedHeads{a.kv_heads(), a.head_size()};
  }
  // A norm over the whole projection has every head's entries; a per-head norm one head's.
  if (titan_name.ends_with("attention.q_norm.weight")) {
    return PermutedHeads{a.qk_norm_whole_projection ? a.n_heads : 1, a.head_size()};
  }
  if (titan_name.ends_with("attention.k_norm.weight")) {
    return PermutedHeads{a.qk_norm_whole_projection ? a.kv_heads() : 1, a.head_size()};
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

std::string hf_expert_tensor_name(const std::string& titan_name, int64_t expert) {
  const auto split = split_layer_name(titan_name, "layers.");
  if (!split) return "";
  for (const NamePair& pair : kExpertNames) {
    if (split->second == pair.titan)
      return fmt::format("model.layers.{}.mlp.experts.{}.{}", split->first, expert, pair.hf);
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

std::string hf_tensor_name(const HfFamily& family, const std::string& titan_name) {
  for (const NamePair& pair : kTopNames) {
    if (titan_name == pair.titan) return top_hf_name(family, pair);
  }
  const auto found = find_layer_name(family, titan_name);
  if (!found || found->second.parts != 1) return "";
  return fmt::format("{}layers.{}.{}", family.weights_prefix, found->first, found->second.hf);
}

std::string titan_tensor_name(const HfFamily& family, const std::string& hf_name) {
  for (const NamePair& pair : kTopNames) {
    if (hf_name == top_hf_name(family, pair)) return pair.titan;
  }
  const auto split = split_layer_name(hf_name, family.weights_prefix + "layers.");
  if (!split) return "";
  for (const LayerName& entry : layer_names(family)) {
    if (entry.parts == 1 && split->second == entry.hf) return fmt::format("layers.{}.{}", split->first, entry.titan);
  }
  return "";
}

Shape hf_part_shape(const HfTensorPart& part, const Shape& titan_shape) {
  if (part.expert < 0) return titan_shape;
  return Shape(titan_shape.begin() + 1, titan_shape.end());
}

Shape hf_expert_tensor_shape(HfTensorLayout layout, size_t parts, const Shape& part_shape) {
  TITAN_CHECK(part_shape.size() == 2 || part_shape.size() == 3,
              "stacked expert tensors are [E, n] or [E, n, m], got {}", shape_str(part_shape));
  Shape shape = part_shape;
  if (layout == HfTensorLayout::experts_interleaved) shape[1] *= static_cast<int64_t>(parts);
  if (shape.size() == 3) std::swap(shape[1], shape[2]);
  return shape;
}

Tensor to_hf_expert_tensor(HfTensorLayout layout, const std::vector<Tensor>& parts) {
  const Tensor& first = parts.front();
  Tensor joined = first.to(Device::cpu()).contiguous();
  if (layout == HfTensorLayout::experts_interleaved) {
    // [E, n, ...] x parts -> [E, n, parts, ...] -> [E, n * parts, ...]: part p at rows p, p + parts, ...
    Shape stacked = first.shape();
    stacked.insert(stacked.begin() + 2, static_cast<int64_t>(parts.size()));
    Tensor both = Tensor::empty(stacked, first.dtype());
    for (size_t p = 0; p < parts.size(); ++p) {
      titan::copy_(both.select(2, static_cast<int64_t>(p)), parts[p].to(Device::cpu()));
    }
    Shape merged = first.shape();
    merged[1] *= static_cast<int64_t>(parts.size());
    joined = both.view(merged);
  }
  return joined.dim() == 3 ? joined.transpose(1, 2).contiguous() : joined;
}

Tensor from_hf_expert_tensor(HfTensorLayout layout, const Tensor& hf_tensor, size_t part) {
  Tensor titan = hf_tensor.dim() == 3 ? hf_tensor.transpose(1, 2).contiguous() : hf_tensor.contiguous();
  if (layout != HfTensorLayout::experts_interleaved) return titan;
  Shape split = titan.shape();
  split[1] /= 2;
  split.insert(split.begin() + 2, 2);
  return titan.view(split).select(2, static_cast<int64_t>(part)).contiguous();
}

Shape hf_joined_shape(const HfTensorPlan& plan, const std::vector<Shape>& part_shapes) {
  TITAN_CHECK(!part_shapes.empty(), "'{}' has no parts", plan.hf_name);
  const Shape& first = part_shapes.front();
  switch (plan.layout) {
    case HfTensorLayout::rows:
    case HfTensorLayout::experts_interleaved:
    case HfTensorLayout::experts_transposed:
      return hf_expert_tensor_shape(plan.layout, part_shapes.size(), first);
    case HfTensorLayout::blocks_interleaved: {
      TITAN_CHECK(first.size() >= 2, "'{}' interleaves blocks of rows, but its parts are {}", plan.hf_name,
                  shape_str(first));
      Shape shape = first;
      shape[shape.size() - 2] *= static_cast<int64_t>(part_shapes.size());
      return shape;
    }
    case HfTensorLayout::depthwise_conv: {
      int64_t channels = 0;
      for (const Shape& part : part_shapes) {
        TITAN_CHECK(part.size() == 2 && part[1] == first[1], "'{}' stacks [channels, kernel] convs, got {}",
                    plan.hf_name, shape_str(part));
        channels += part[0];
      }
      return {channels, 1, first[1]};
    }
  }
  return first;
}

namespace hf_joined_layout {

// blocks_interleaved's view of a part: [blocks, block_rows, columns], a 3-d expert stack's rows flattened.
Shape interleaved_blocks(const HfTensorPlan& plan, const Shape& part_shape) {
  TITAN_CHECK(plan.block_rows > 0 && part_shape.size() >= 2 && part_shape[part_shape.size() - 2] % plan.block_rows == 0,
              "'{}': parts of shape {} do not cut into blocks of {} rows", plan.hf_name, shape_str(part_shape),
              plan.block_rows);
  const int64_t columns = part_shape.back();
  return {shape_numel(part_shape) / (plan.block_rows * columns), plan.block_rows, columns};
}

}  // namespace hf_joined_layout

Tensor to_hf_joined_tensor(const HfTensorPlan& plan, const std::vector<Tensor>& parts) {
  if (plan.layout != HfTensorLayout::blocks_interleaved && plan.layout != HfTensorLayout::depthwise_conv) {
    return to_hf_expert_tensor(plan.layout, parts);
  }
  std::vector<Shape> shapes;
  shapes.reserve(parts.size());
  for (const Tensor& part : parts) shapes.push_back(part.shape());
  const Shape shape = hf_joined_shape(plan, shapes);
  Tensor joined = Tensor::empty(shape, parts.front().dtype());
  if (plan.layout == HfTensorLayout::depthwise_conv) {
    int64_t row = 0;
    for (const Tensor& part : parts) {
      titan::copy_(joined.narrow(0, row, part.size(0)), part.to(Device::cpu()).unsqueeze(1));
      row += part.size(0);
    }
    return joined;
  }
  // [blocks, parts, block_rows, columns]: block b of part p at (b, p).
  const Shape blocks = hf_joined_layout::interleaved_blocks(plan, shapes.front());
  const Tensor view = joined.view({blocks[0], static_cast<int64_t>(parts.size()), blocks[1], blocks[2]});
  for (size_t p = 0; p < parts.size(); ++p) {
    TITAN_CHECK(parts[p].shape() == shapes.front(), "parts of '{}' differ in shape ({} vs {})", plan.hf_name,
                shape_str(parts[p].shape()), shape_str(shapes.front()));
    titan::copy_(view.select(1, static_cast<int64_t>(p)), parts[p].to(Device::cpu()).contiguous().view(blocks));
  }
  return joined;
}

Tensor from_hf_joined_tensor(const HfTensorPlan& plan, const std::vector<Shape>& part_shapes, const Tensor& hf_tensor,
                             size_t part) {
  if (plan.layout != HfTensorLayout::blocks_interleaved && plan.layout != HfTensorLayout::depthwise_conv) {
    return from_hf_expert_tensor(plan.layout, hf_tensor, part);
  }
  const Shape expected = hf_joined_shape(plan, part_shapes);
  TITAN_CHECK(hf_tensor.shape() == expected, "'{}' is {}, expected {}", plan.hf_name, shape_str(hf_tensor.shape()),
              shape_str(expected));
  const Tensor whole = hf_tensor.contiguous();
  if (plan.layout == HfTensorLayout::depthwise_conv) {
    int64_t row = 0;
    for (size_t p = 0; p < part; ++p) row += part_shapes[p][0];
    return whole.narrow(0, row, part_shapes[part][0]).contiguous().view(part_shapes[part]);
  }
  const Shape blocks = hf_joined_layout::interleaved_blocks(plan, part_shapes[part]);
  return whole.view({blocks[0], static_cast<int64_t>(part_shapes.size()), blocks[1], blocks[2]})
      .select(1, static_cast<int64_t>(part))
      .contiguous()
      .view(part_shapes[part]);
}

namespace hf_mtp_names {

// The plan of a model with multi-token prediction layers: theirs planned as
// layers L + k (DeepSeek's files), then each such layer's copies of the
// embedding table and output head; nullopt for a model without them.
std::optional<std::vector<HfTensorPlan>> plan(const HfFamily& family,
                                              const std::vector<std::pair<std::string, Shape>>& titan_tensors) {
  int64_t main_layers = 0;
  std::set<int64_t> depths;
  for (const auto& [name, shape] : titan_tensors) {
    if (const auto layer = split_layer_name(name, "layers.")) main_layers = std::max(main_layers, layer->first + 1);
    if (const auto depth = split_layer_name(name, "mtp_layers.")) depths.insert(depth->first);
  }
  if (depths.empty()) return std::nullopt;
  TITAN_CHECK(family.latent_attention, "multi-token prediction layers have no {} equivalent", family.architecture);
  std::vector<std::pair<std::string, Shape>> as_layers;
  std::map<std::string, std::string> titan_name_of;  // "layers.{L+k}.rest" -> "mtp_layers.k.rest"
  for (const auto& [name, shape] : titan_tensors) {
    const auto depth = split_layer_name(name, "mtp_layers.");
    if (!depth) {
      as_layers.emplace_back(name, shape);
      continue;
    }
    const std::string layer_name = fmt::format("layers.{}.{}", main_layers + depth->first, depth->second);
    titan_name_of[layer_name] = name;
    as_layers.emplace_back(layer_name, shape);
  }
  std::vector<HfTensorPlan> planned = hf_tensor_plan(family, as_layers);
  for (HfTensorPlan& entry : planned) {
    for (HfTensorPart& part : entry.parts) {
      if (const auto found = titan_name_of.find(part.titan_name); found != titan_name_of.end()) {
        part.titan_name = found->second;
      }
    }
  }
  const auto holds = [&](const std::string& name) {
    return std::any_of(titan_tensors.begin(), titan_tensors.end(), [&](const auto& t) { return t.first == name; });
  };
  const std::string head = holds("output.weight") ? "output.weight" : "tok_embeddings.weight";
  for (int64_t depth : depths) {
    const int64_t layer = main_layers + depth;
    for (const auto& [hf, titan] : {std::pair{"embed_tokens.weight", std::string("tok_embeddings.weight")},
                                    std::pair{"shared_head.head.weight", head}}) {
      if (!holds(titan)) continue;
      HfTensorPlan copy{fmt::format("{}layers.{}.{}", family.weights_prefix, layer, hf), {{titan, -1}}};
      copy.copy = true;
      planned.push_back(copy);
    }
  }
  return planned;
}

}  // namespace hf_mtp_names

std::vector<HfTensorPlan> hf_tensor_plan(const HfFamily& family,
                                         const std::vector<std::pair<std::string, Shape>>& titan_tensors) {
  if (auto with_mtp = hf_mtp_names::plan(family, titan_tensors)) return *with_mtp;
  std::vector<HfTensorPlan> plan;
  std::map<std::string, size_t> fused;   // HF name -> its entry in `plan`, for tensors of several parts
  std::map<int64_t, int64_t> head_dims;  // layer -> its q_norm's width: q_proj's blocks
  for (const auto& [name, shape] : titan_tensors) {
    if (family.gated_delta_net) {
      const auto split = split_layer_name(name, "layers.");
      const JoinedTensor* joined = nullptr;
      size_t part = 0;
      for (const JoinedTensor& candidate : joined_tensors()) {
        for (size_t p = 0; p < candidate.parts.size(); ++p) {
          if (split && split->second == candidate.parts[p] && (!candidate.experts || family.joined_experts)) {
            joined = &candidate;
            part = p;
          }
        }
      }
      if (split && split->second == "attention.q_norm.weight" && !shape.empty()) head_dims[split->first] = shape[0];
      if (joined != nullptr) {
        const std::string hf_name = fmt::format("{}layers.{}.{}", family.weights_prefix, split->first, joined->hf);
        auto [at, inserted] = fused.try_emplace(hf_name, plan.size());
        if (inserted) plan.push_back({hf_name, std::vector<HfTensorPart>(joined->parts.size()), joined->layout});
        HfTensorPlan& entry = plan[at->second];
        TITAN_CHECK(entry.parts[part].titan_name.empty(), "tensor '{}' is listed twice", name);
        entry.parts[part].titan_name = name;
        // An expert stack's blocks are each expert's rows; q_proj's are heads (set below from q_norm).
        if (shape.size() == 3) entry.block_rows = shape[1];
        continue;
      }
    }
    if (family.stacked_experts) {
      const auto split = split_layer_name(name, "layers.");
      const StackedExperts* stack = nullptr;
      size_t part = 0;
      for (const StackedExperts& candidate : kStackedExperts) {
        if (split && split->second == candidate.first) stack = &candidate;
        if (split && candidate.second != nullptr && split->second == candidate.second) {
          stack = &candidate;
          part = 1;
        }
      }
      if (stack != nullptr) {
        const std::string hf_name = fmt::format("{}layers.{}.{}", family.weights_prefix, split->first, stack->hf);
        auto [at, inserted] = fused.try_emplace(hf_name, plan.size());
        if (inserted) {
          plan.push_back({hf_name, std::vector<HfTensorPart>(stack->second != nullptr ? 2 : 1), stack->layout});
        }
        HfTensorPart& slot = plan[at->second].parts[part];
        TITAN_CHECK(slot.titan_name.empty(), "tensor '{}' is listed twice", name);
        slot.titan_name = name;
        continue;
      }
    }
    if (family.mixture_of_experts && !hf_expert_tensor_name(name, 0).empty()) {
      TITAN_CHECK(!shape.empty(), "tensor '{}' of experts has no expert dimension", name);
      for (int64_t e = 0; e < shape[0]; ++e) plan.push_back({hf_expert_tensor_name(name, e), {{name, e}}});
      continue;
    }
    const std::string whole = hf_tensor_name(family, name);
    if (!whole.empty()) {
      plan.push_back({whole, {{name, -1}}});
      continue;
    }
    const auto found = find_layer_name(family, name);
    TITAN_CHECK(found.has_value(), "tensor '{}' has no Hugging Face name in {}", name, family.architecture);
    const auto& [layer, entry] = *found;
    const std::string hf_name = fmt::format("{}layers.{}.{}", family.weights_prefix, layer, entry.hf);
    auto [at, inserted] = fused.try_emplace(hf_name, plan.size());
    if (inserted) plan.push_back({hf_name, std::vector<HfTensorPart>(static_cast<size_t>(entry.parts))});
    HfTensorPart& part = plan[at->second].parts[static_cast<size_t>(entry.part)];
    TITAN_CHECK(part.titan_name.empty(), "tensor '{}' is listed twice", name);
    part.titan_name = name;
  }
  for (HfTensorPlan& entry : plan) {
    if (entry.layout != HfTensorLayout::blocks_interleaved || entry.block_rows > 0) continue;
    const auto split = split_layer_name(entry.hf_name, family.weights_prefix + "layers.");
    TITAN_CHECK(split && head_dims.count(split->first) != 0,
                "{}'s tensor '{}' interleaves heads, but its layer has no q_norm to give their size",
                family.architecture, entry.hf_name);
    entry.block_rows = head_dims.at(split->first);
  }
  for (const auto& [hf_name, index] : fused) {
    for (size_t i = 0; i < plan[index].parts.size(); ++i) {
      // Name the missing part by what its siblings are called in titan.
      const std::string present = plan[index].parts.size() > 1 ? plan[index].parts[i == 0 ? 1 : 0].titan_name : "";
      TITAN_CHECK(!plan[index].parts[i].titan_name.empty(),
                  "{}'s tensor '{}' is rows of several titan tensors, and part {} of them is missing (next to '{}')",
                  family.architecture, hf_name, i, present);
    }
  }
  return plan;
}

bool hf_tensor_ignored(const std::string& hf_name, const DecoderConfig& config) {
  return hf_name.ends_with("rotary_emb.inv_freq") || (config.tie_embeddings && hf_name == "lm_head.weight");
}

bool hf_tensor_skipped(const HfFamily& family, const std::string& hf_name) {
  return std::any_of(family.skipped_tensor_prefixes.begin(), family.skipped_tensor_prefixes.end(),
                     [&](const std::string& prefix) { return hf_name.starts_with(prefix); });
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

bool hf_rows_permuted(const std::string& titan_name, const DecoderConfig& config) {
  return permuted_heads(titan_name, config).has_value();
}

int64_t hf_row_of(const std::string& titan_name, int64_t row, const DecoderConfig& config) {
  const auto heads = permuted_heads(titan_name, config);
  if (!heads) return row;
  const int64_t head = row / heads->head_dim, interleaved = row % heads->head_dim;
  const int64_t hf = interleaved % 2 == 0 ? interleaved / 2 : heads->head_dim / 2 + interleaved / 2;
  return head * heads->head_dim + hf;
}

}  // namespace titan::models
