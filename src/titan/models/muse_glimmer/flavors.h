// Muse Glimmer text models (TorchTitan's muse_glimmer): a GQA decoder with
// post-norm residuals around every sublayer, gain-centred norms (scale 1 + w,
// w drawn as 0; the final norm scales by w itself), scaleless RMSNorms on the
// queries, keys and looked-up embeddings, a tuned query scale, a sigmoid gate
// on the attention output, iRoPE (every 4th layer counted back from the last
// has no RoPE) with a cyclic sliding/global window pattern aligned to it, and
// a soft-capped output head (20 tanh(m z / 20)). TorchTitan defines it by its
// own flavors; Hugging Face's MuseGlimmerForConditionalGeneration folders
// are read and written through hf_family.h (the text decoder).
#pragma once

#include <vector>

#include "titan/models/model_spec.h"

namespace titan::models::muse_glimmer {

struct Args {
  int64_t dim = 6656;
  int64_t n_layers = 52;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 2;
  int64_t head_dim = 128;
  int64_t vocab_size = 202048;
  int64_t max_seq_len = 16384;  // TorchTitan's max_context_length
  // Layer i's window is window_pattern[(i + 4 - n_layers % 4) % size]; 0 = global.
  std::vector<int64_t> window_pattern{2048, 2048, 2048, 0};
  double output_multiplier = 0.19611613513;
};

// TorchTitan's constants, the same in every flavor.
inline constexpr double kNormEps = 1e-5;
inline constexpr double kPostNormEps = 1e-8;
inline constexpr double kRopeTheta = 500000.0;
inline constexpr int64_t kNopeEvery = 4;                       // iRoPE: one layer in four has no RoPE
inline constexpr double kFfnMultiplier = 3.0;                  // SwiGLU hidden = int(3 dim)
inline constexpr double kQueryScaleNumerator = 43.7840518911;  // queries times this / sqrt(head_dim)
inline constexpr float kOutputSoftcap = 20.0f;

// Whether layer `layer` of `n_layers` rotates (NoPE layers counted from the last).
bool layer_uses_rope(int64_t layer, int64_t n_layers);
// Layer `layer`'s sliding window (0 = global), the pattern aligned to the iRoPE phase.
int64_t layer_window(int64_t layer, int64_t n_layers, const std::vector<int64_t>& pattern);

DecoderConfig to_config(const Args& args);
ModelSpec spec();

}  // namespace titan::models::muse_glimmer
