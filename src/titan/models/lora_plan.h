// LoRA fine-tuning of a decoder, from outside the model code: installs a
// LoraAdapter (nn/lora.h) on the chosen projections of every block, freezes
// every other parameter, and turns the result into what others read: a
// merged model (W + alpha/r B A) or a PEFT adapter folder
// (adapter_config.json + adapter_model.safetensors, Hugging Face names).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "titan/checkpoint/safetensors.h"
#include "titan/models/decoder.h"
#include "titan/nn/lora.h"

namespace titan::models {

struct LoraOptions {
  int64_t rank = 8;
  double alpha = 16.0;
  double dropout = 0.0;
  // Short (q, k, v, o, gate, up, down) or Hugging Face (q_proj, ...) names.
  std::vector<std::string> target_modules{"q", "k", "v", "o"};
};

struct LoraAdapted {
  std::string module;  // the base Linear's FQN: "layers.0.attention.wq"
  nn::Linear* linear;
  std::shared_ptr<nn::LoraAdapter> adapter;
};

// Installs adapters on `model` (before it is parallelized), initialises them
// from `init`'s seed by name (PEFT's default: A uniform, B zero; nothing is
// drawn on the meta device) and freezes every parameter
// but theirs. `dropout` draws dropout masks (may be null when options.dropout
// is 0) and must outlive the model. Errors name a target that matches no
// projection of this model (mixture-of-experts feed-forwards have none).
std::vector<LoraAdapted> apply_lora(Decoder& model, const LoraOptions& options, const Generator& init,
                                    Generator* dropout);
// The adapters installed on `model` (empty without LoRA).
std::vector<LoraAdapted> lora_adapters(Decoder& model);

// The Hugging Face module names of the targets (q_proj, ...), in kLoraTargets order.
std::vector<std::string> lora_hf_target_modules(const std::vector<std::string>& targets);

// The PEFT adapter of `model` (whole parameters) in `folder` (created):
// adapter_model.safetensors with "base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight"
// [r, in] / "...lora_B.weight" [out, r] in `dtype` (B's rows in Hugging Face's
// RoPE layout, as the base weight's), and adapter_config.json. `model_name`
// says the family; one that fuses projections in its HF tensors (Phi-3's
// qkv_proj, gate_up_proj) has no PEFT form of titan's separate adapters: an
// error (check peft_adapter_supported first).
void write_peft_adapter(const std::string& folder, Decoder& model, const std::string& model_name,
                        const LoraOptions& options, const std::string& base_model_name_or_path, DType dtype);
// The same from whole adapters (A, B) by base module FQN, as a streamed export collects them.
using WholeAdapters = std::map<std::string, std::pair<Tensor, Tensor>>;
void write_peft_adapter(const std::string& folder, const WholeAdapters& adapters, const DecoderConfig& decoder,
                        const std::string& model_name, const LoraOptions& options,
                        const std::string& base_model_name_or_path, DType dtype);
// Whether write_peft_adapter can write adapters of `model_name`'s family.
bool peft_adapter_supported(const std::string& model_name);

// A PEFT adapter folder read back: its options and A / B by titan base
// module FQN ("layers.0.attention.wq"), B in titan's layout.
struct PeftAdapter {
  LoraOptions options;
  std::map<std::string, std::pair<Tensor, Tensor>> weights;  // module -> (A, B), f32
};
PeftAdapter read_peft_adapter(const std::string& folder, const DecoderConfig& config);
// Adds scale B A into the base weights of `state` (titan names, whole
// tensors). Errors name a module the state lacks.
void merge_peft_adapter(std::map<std::string, Tensor>& state, const PeftAdapter& adapter);
// The same one weight at a time, what `titan convert --merge-lora` streams:
// check that every adapted module's weight is among `weight_names` first,
// then each weight `name` (whole) with its adapter's scale B A added, or as
// it is when no adapter adapts it.
void check_peft_adapter_fits(const std::set<std::string>& weight_names, const PeftAdapter& adapter);
Tensor merged_peft_weight(const std::string& name, const Tensor& weight, const PeftAdapter& adapter);

}  // namespace titan::models
