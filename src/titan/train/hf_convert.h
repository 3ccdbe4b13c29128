// `titan convert`: titan model exports <-> Hugging Face folders. The titan
// side is the model export (job.toml + model.safetensors + tokenizer) that
// `titan generate` loads; an export converted from HF carries the config.json
// it came from as model.hf_config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "titan/core/dtype.h"

namespace titan::train {

struct ConvertOptions {
  std::optional<DType> dtype;                    // nullopt: keep the source's dtype (bit for bit)
  uint64_t max_shard_bytes = uint64_t{5} << 30;  // HF side only
  // A PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors)
  // merged into the weights: W + (lora_alpha / r) B A. Empty: none.
  std::string merge_lora;
  bool allow_nonfinite = false;  // convert weights holding NaN or Inf (named in a warning) instead of refusing
};

void convert_hf_to_titan(const std::string& hf_folder, const std::string& output, const ConvertOptions& options);
void convert_titan_to_hf(const std::string& titan_folder, const std::string& output, const ConvertOptions& options);

}  // namespace titan::train
