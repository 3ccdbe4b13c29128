// `titan convert`: titan model exports <-> Hugging Face folders. The titan
// side is the model export (job.toml + model.safetensors + tokenizer) that
// `titan generate` loads; an export converted from HF carries the config.json
// it came from as model.hf_config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "titan/checkpoint/tensor_source.h"
#include "titan/core/dtype.h"
#include "titan/models/decoder.h"
#include "titan/train/job_config.h"

namespace titan::train {

struct ConvertOptions {
  std::optional<DType> dtype;                    // nullopt: keep the source's dtype (bit for bit)
  uint64_t max_shard_bytes = uint64_t{5} << 30;  // HF side only
  // A PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors)
  // merged into the weights: W + (lora_alpha / r) B A. Empty: none.
  std::string merge_lora;
  bool allow_nonfinite = false;  // convert weights holding NaN or Inf (named in a warning) instead of refusing
};

// Writes a model export from `sources` (titan-named tensors of `decoder`, as
// `config` describes it) converted from `source`: options.merge_lora merged
// in, NaN and Inf refused (or, allowed, named), export_dtype the sources'.
void write_converted_export(const std::string& source, const std::string& output, JobConfig config,
                            const models::DecoderConfig& decoder, checkpoint::TensorSources sources,
                            const ConvertOptions& options);

void convert_hf_to_titan(const std::string& hf_folder, const std::string& output, const ConvertOptions& options);
void convert_titan_to_hf(const std::string& titan_folder, const std::string& output, const ConvertOptions& options);

}  // namespace titan::train
