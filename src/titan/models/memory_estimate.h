// Training memory per rank, estimated without allocating anything: the
// parameter count comes from a model built on the meta device, the
// activation bytes from what each block's backward keeps (see the .cpp).
#pragma once

#include <string>

#include "titan/models/decoder.h"

namespace titan::models {

struct MemoryEstimateOptions {
  int64_t batch = 1;
  int64_t seq_len = 2048;
  DType compute_dtype = DType::bf16;  // activations and materialised parameters
  DType optimizer_state_dtype = DType::f32;
  std::string activation_checkpoint = "none";  // none, full, selective, offload
  int64_t selective_every = 2;
  int64_t dp_shard = 1;  // FSDP shards: parameters, gradients and optimizer states divide by it
};

struct MemoryEstimate {
  int64_t parameters = 0;         // count
  double parameter_bytes = 0;     // f32 master weights (this rank's shard)
  double gradient_bytes = 0;      // f32 gradients (this rank's shard)
  double optimizer_bytes = 0;     // AdamW moments (this rank's shard)
  double compute_copy_bytes = 0;  // parameters materialised in the compute dtype while alive for backward
  double activation_bytes = 0;    // saved for backward at the peak (end of forward)
  double loss_bytes = 0;          // fused loss: its hidden and weight gradients
  double total() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + compute_copy_bytes + activation_bytes + loss_bytes;
  }
};

MemoryEstimate estimate_memory(const DecoderConfig& config, const MemoryEstimateOptions& options);
std::string format_memory_estimate(const MemoryEstimate& estimate);

}  // namespace titan::models
