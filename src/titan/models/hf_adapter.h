// Hugging Face interop for the decoder families: config.json <-> DecoderConfig,
// titan FQNs <-> HF tensor names, and the layout changes between them. The
// logic is shared here; each family (models/<name>/hf_adapter) contributes
// only its HfFamily (models/hf_config.h): architecture, model_type, config
// defaults, RoPE pairing.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "titan/models/decoder.h"
#include "titan/models/hf_config.h"

namespace titan::models {

DecoderConfig decoder_config_from_hf(const HfConfig& config);
HfConfig hf_config_from_decoder(const std::string& model_name, const DecoderConfig& config, DType dtype);

// The HF name of a titan parameter FQN ("layers.3.attention.wq.weight" ->
// "model.layers.3.self_attn.q_proj.weight"), and back ("" when the name is not
// one titan has).
std::string hf_tensor_name(const std::string& titan_name);
std::string titan_tensor_name(const std::string& hf_name);
// A MoE layer's experts are one titan tensor per projection, stacked along dim
// 0 ("layers.3.moe.experts.w1" [E, hidden, dim]), and one HF tensor per expert
// ("model.layers.3.mlp.experts.5.gate_proj.weight"): the HF name of expert
// e's slice ("" for a tensor that is not such a stack), and back.
std::string hf_expert_tensor_name(const std::string& titan_name, int64_t expert);
std::optional<std::pair<std::string, int64_t>> titan_expert_tensor(const std::string& hf_name);
// Tensors HF checkpoints may hold that carry no weights titan needs (e.g. a
// stored rotary_emb.inv_freq, or lm_head.weight next to tied embeddings).
bool hf_tensor_ignored(const std::string& hf_name, const DecoderConfig& config);

// A titan parameter in HF layout and back (host tensors; row permutations
// only, so any dtype round-trips bit for bit). Only q/k projections (and q/k
// norms) of an interleaved-RoPE model change: each head's rows go from pairs
// (2i, 2i+1) to halves (i, i + head_dim/2), which is what HF's rotate_half
// expects.
Tensor to_hf_layout(const std::string& titan_name, const Tensor& tensor, const DecoderConfig& config);
Tensor from_hf_layout(const std::string& titan_name, const Tensor& tensor, const DecoderConfig& config);

}  // namespace titan::models
