// Rotary position embeddings. Two pairings of a head's features exist in the
// wild: Meta's Llama code rotates interleaved pairs (x[2i], x[2i+1]); Hugging
// Face rotates halves (x[i], x[i + D/2]). Both use the same angle table.
#pragma once

#include <vector>

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

enum class RopeStyle { interleaved, half };

// How the inverse frequencies are scaled for longer contexts, as Hugging
// Face's modeling_rope_utils computes them (transformers 5) for each
// rope_type. `none` is the original RoPE (rope_type "default").
enum class RopeScalingType { none, linear, dynamic, yarn, longrope, llama3 };
// transformers' rope_type name. Inline: the config.json parser uses it and is fuzzed without the tensor code.
constexpr const char* rope_scaling_type_name(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::none:
      return "default";
    case RopeScalingType::linear:
      return "linear";
    case RopeScalingType::dynamic:
      return "dynamic";
    case RopeScalingType::yarn:
      return "yarn";
    case RopeScalingType::longrope:
      return "longrope";
    case RopeScalingType::llama3:
      return "llama3";
  }
  return "?";
}

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  // linear: frequencies / factor. dynamic (NTK): the base grows with the table's
  // length beyond original_max_position. yarn: interpolation by factor blended
  // with extrapolation. llama3: wavelength-dependent. longrope: ignored for the
  // frequencies; with original_max_position it sets the default attention factor.
  double factor = 0.0;
  // llama3's and yarn's pre-training context; dynamic's length beyond which the
  // base grows (transformers' max_position_embeddings); longrope's switch
  // point between short_factor and long_factor.
  int64_t original_max_position = 8192;
  double low_freq_factor = 1.0;  // llama3
  double high_freq_factor = 4.0;
  double beta_fast = 32.0;  // yarn: rotations bounding the ramp between extrapolation and interpolation
  double beta_slow = 1.0;
  double mscale = 0.0;  // yarn (DeepSeek): attention factor mscale(factor, mscale) / mscale(factor, mscale_all_dim)
  double mscale_all_dim = 0.0;  // when both are set (0 = absent)
  bool truncate = true;         // yarn: round the ramp's bounds outwards to whole dimensions
  // yarn and longrope: cos and sin are multiplied by this; 0 = the type's formula.
  double attention_factor = 0.0;
  std::vector<double> short_factor{}, long_factor{};  // longrope: per-frequency divisors, rotary_dim / 2 each

  bool operator==(const RopeScaling&) const = default;
};

// YaRN's magnitude correction: 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1.
// DeepSeek-V3 multiplies its softmax scale by yarn_get_mscale(factor, mscale_all_dim)^2.
double yarn_get_mscale(double scale, double mscale = 1.0);

// The per-pair inverse frequencies [rotary_dim / 2] (f64) for a table of
// `max_positions` rows: theta^(-2i / rotary_dim), then scaled.
//  - dynamic: transformers recomputes the base for each forward's length
//    beyond original_max_position. titan builds one table, for max_positions
//    rows: the base for that length when it exceeds original_max_position,
//    else the plain one. A model whose max_seq_len is the HF
//    max_position_embeddings therefore matches transformers exactly for every
//    sequence it accepts; a longer max_seq_len gives every sequence the
//    frequencies transformers uses for a sequence of max_seq_len tokens (one
//    table: a position's rotation must not depend on the batch's length, or
//    cached keys would disagree with later queries).
//  - longrope: transformers divides by long_factor when the forward's length
//    exceeds original_max_position, else by short_factor. titan, with one
//    table, picks by max_positions the same way: long_factor when the table
//    reaches past original_max_position. Set max_seq_len <= the original length
//    to get the short factors.
std::vector<double> rope_inverse_frequencies(int64_t rotary_dim, int64_t max_positions, double theta,
                                             const RopeScaling& scaling);
// What cos and sin are multiplied by: 1 except for yarn (attention_factor, or
// yarn_get_mscale(factor) / the DeepSeek ratio) and longrope (attention_factor,
// or sqrt(1 + ln(factor) / ln(original_max_position)) when factor > 1).
double rope_attention_factor(const RopeScaling& scaling);

struct RopeTable {
  Tensor cos;  // [max_positions, rotary_dim / 2] f32, times the attention factor
  Tensor sin;
};

// angle(p, i) = p * freq_i (rope_inverse_frequencies); cos and sin computed in
// f64, multiplied by rope_attention_factor, and rounded once to f32.
// rotary_dim: the features of a head that rotate (the whole head, or its
// first partial_rotary_factor part).
RopeTable rope_table(int64_t rotary_dim, int64_t max_positions, double theta, const RopeScaling& scaling,
                     Device device = Device::cpu());

// x [B, S, H, D] -> rotated copy. positions [B, S] (i32/i64) gives each
// token's position (restarting per packed document); undefined means 0..S-1.
// A table narrower than the head (partial rotary: 2 * its columns < D)
// rotates the first 2 * columns features of each head, paired within them as
// `style` says, and copies the rest (transformers' q[..., :rotary_dim]).
// inverse = true rotates by -angle: the backward of the forward rotation.
Tensor rope(const Tensor& x, const RopeTable& table, const Tensor& positions, RopeStyle style, bool inverse = false);

using RopeKernel = void(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                        const Tensor& positions, RopeStyle style, bool inverse);
inline Op<RopeKernel> rope_kernels{"rope"};

}  // namespace titan::ops
