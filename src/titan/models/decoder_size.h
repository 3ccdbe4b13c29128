// Parameter counts and training FLOPs of a decoder config, from the config
// alone (no model is built): what MFU, the banner and flavor tables report.
#pragma once

#include "titan/models/decoder.h"

namespace titan::models {

// Every parameter, embeddings, all experts and multi-token prediction depths
// included (the FLOPs below count the depths' weights, not their attention
// scores or their passes through the output head).
int64_t parameter_count(const DecoderConfig& config);
// The parameters one token goes through: a mixture-of-experts layer counts its
// router, its shared experts and top_k of its experts.
int64_t active_parameter_count(const DecoderConfig& config);

// Forward + backward FLOPs per token for sequence length `seq_len`, as
// TorchTitan counts them: 6 x (active parameters - embedding table) for the
// matrix multiplies, plus 12 x heads x head_dim x seq_len per layer for
// attention scores and weighted sums (full square, causal masking not discounted).
double training_flops_per_token(const DecoderConfig& config, int64_t seq_len);

}  // namespace titan::models
