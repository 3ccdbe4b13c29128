// Where each titan parameter lives in a Hugging Face checkpoint of its family:
// tensor names (which depend on the family: its norms, its biases, its fused
// projections), the plan of HF tensors (one HF tensor may be the rows of
// several titan tensors, Phi-3's qkv_proj, or one expert's slice of a stacked
// titan tensor, Qwen3-MoE's experts), and the per-tensor layout change (the
// q/k row permutation of interleaved-RoPE families).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/models/decoder.h"
#include "titan/models/hf/hf_config.h"

namespace titan::models {

// The HF name of a titan parameter FQN of `family`'s model
// ("layers.3.attention.wq.weight" -> "model.layers.3.self_attn.q_proj.weight"),
// and back. "" when the name is not one the family has, or when the tensor has
// no HF tensor of its own (a part of a fused projection, a stacked expert
// tensor: hf_tensor_plan places those).
std::string hf_tensor_name(const HfFamily& family, const std::string& titan_name);
std::string titan_tensor_name(const HfFamily& family, const std::string& hf_name);
// A MoE layer's experts are one titan tensor per projection, stacked along dim
// 0 ("layers.3.moe.experts.w1" [E, hidden, dim]), and one HF tensor per expert
// ("model.layers.3.mlp.experts.5.gate_proj.weight"): the HF name of expert
// e's slice ("" for a tensor that is not such a stack), and back.
std::string hf_expert_tensor_name(const std::string& titan_name, int64_t expert);
std::optional<std::pair<std::string, int64_t>> titan_expert_tensor(const std::string& hf_name);

// One HF tensor as titan holds it: the rows of `parts` stacked in order (dim
// 0), each a whole titan tensor or, with expert >= 0, that expert's slice of a
// stacked one. Most HF tensors have one whole part.
struct HfTensorPart {
  std::string titan_name;
  int64_t expert = -1;
};
// How an HF tensor's values relate to its parts'. `rows`: the parts' rows
// stacked (the default). The other two are gpt-oss's stacked experts (parts
// [E, n, ...] each): `experts_interleaved`, two parts whose dim 1 alternates
// in the HF tensor (gate, up, gate, ...: gate_up_proj and its bias), and
// `experts_transposed`, one part; either with its last two dims swapped when
// it has three (HF keeps [E, in, out], titan [E, out, in]).
// Qwen3.5 (HfFamily::gated_delta_net) adds two: `blocks_interleaved`, parts
// of one shape cut into blocks of block_rows rows (along dim 0 of a matrix,
// dim 1 of an [E, n, m] stack) that the HF tensor takes in turn (q_proj:
// head h's query rows, then its gate's; gate_up_proj: expert e's gate rows,
// then its up rows), and `depthwise_conv`, the parts' rows stacked with a
// unit dim inserted ([channels, kernel] each -> conv1d's [channels, 1, kernel]).
enum class HfTensorLayout { rows, experts_interleaved, experts_transposed, blocks_interleaved, depthwise_conv };
struct HfTensorPlan {
  std::string hf_name;
  std::vector<HfTensorPart> parts;
  HfTensorLayout layout = HfTensorLayout::rows;
  int64_t block_rows = 0;  // blocks_interleaved's block
  // Another copy of a tensor an earlier entry holds (DeepSeek's MTP layers
  // store the shared embedding table and output head again, as
  // layers.{L+k}.embed_tokens / shared_head.head): written, and on reading
  // checked equal to the first copy, never read into the model.
  bool copy = false;
};
// Every HF tensor of a model whose titan tensors (names and shapes, in the
// model's order) are `titan_tensors`, in that order (a fused tensor where its
// first part is). Multi-token prediction depth k's tensors ("mtp_layers.k-1.")
// are layer L + k - 1's in HF's files, L the model's layers (DeepSeek's
// layout), followed by that layer's copies of the embedding table and output
// head. Errors name a titan tensor the family has no place for, and a fused HF
// tensor some of whose parts are missing. Reading and writing HF folders both
// follow it, so the two directions cannot drift apart.
std::vector<HfTensorPlan> hf_tensor_plan(const HfFamily& family,
                                         const std::vector<std::pair<std::string, Shape>>& titan_tensors);
// The shape of a part (an expert's slice drops dim 0) and of the HF tensor
// (parts' rows added up), from the titan shapes by name.
Shape hf_part_shape(const HfTensorPart& part, const Shape& titan_shape);
// An expert-layout HF tensor (host) from its parts' tensors, and back: part i of it.
Tensor to_hf_expert_tensor(HfTensorLayout layout, const std::vector<Tensor>& parts);
Tensor from_hf_expert_tensor(HfTensorLayout layout, const Tensor& hf_tensor, size_t part);
// The HF shape of an expert-layout tensor whose parts have the titan shape `part_shape`.
Shape hf_expert_tensor_shape(HfTensorLayout layout, size_t parts, const Shape& part_shape);
// Any layout but rows (the expert ones above, and Qwen3.5's): the HF shape from
// the parts' titan shapes, the HF tensor (host) from the parts, and part `part`
// of an HF tensor. Values are only moved, so every dtype round-trips bit for bit.
Shape hf_joined_shape(const HfTensorPlan& plan, const std::vector<Shape>& part_shapes);
Tensor to_hf_joined_tensor(const HfTensorPlan& plan, const std::vector<Tensor>& parts);
Tensor from_hf_joined_tensor(const HfTensorPlan& plan, const std::vector<Shape>& part_shapes, const Tensor& hf_tensor,
                             size_t part);

// Tensors HF checkpoints may hold that carry no weights titan needs (e.g. a
// stored rotary_emb.inv_freq, or lm_head.weight next to tied embeddings).
bool hf_tensor_ignored(const std::string& hf_name, const DecoderConfig& config);
// Tensors of parts of the HF model titan does not hold (a multimodal model's
// vision tower: HfFamily::skipped_tensor_prefixes), skipped on reading.
bool hf_tensor_skipped(const HfFamily& family, const std::string& hf_name);

// A titan parameter in HF layout and back (host tensors; row permutations
// only, so any dtype round-trips bit for bit). Only q/k projections (and q/k
// norms) of an interleaved-RoPE model change: each head's rows go from pairs
// (2i, 2i+1) to halves (i, i + head_dim/2), which is what HF's rotate_half
// expects.
Tensor to_hf_layout(const std::string& titan_name, const Tensor& tensor, const DecoderConfig& config);
Tensor from_hf_layout(const std::string& titan_name, const Tensor& tensor, const DecoderConfig& config);
// The row of the HF tensor (in HF layout) that holds row `row` of titan's
// `titan_name`: the same row, except for the permuted q/k rows above. How a
// rank reads just its shard's rows.
int64_t hf_row_of(const std::string& titan_name, int64_t row, const DecoderConfig& config);
// Whether HF orders the rows of `titan_name` differently (hf_row_of is not the identity).
bool hf_rows_permuted(const std::string& titan_name, const DecoderConfig& config);

}  // namespace titan::models
