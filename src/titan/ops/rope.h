// Rotary position embeddings. Two pairings of a head's features exist in the
// wild: Meta's Llama code rotates interleaved pairs (x[2i], x[2i+1]); Hugging
// Face rotates halves (x[i], x[i + D/2]). Both use the same angle table.
#pragma once

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

enum class RopeStyle { interleaved, half };

// Llama 3.1's wavelength-dependent frequency scaling (factor 0 = off).
struct RopeScaling {
  double factor = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;

  bool operator==(const RopeScaling&) const = default;
};

struct RopeTable {
  Tensor cos;  // [max_positions, head_dim / 2] f32
  Tensor sin;
};

// angle(p, i) = p * freq_i with freq_i = theta^(-2i / head_dim) (then scaled),
// computed in f64 and rounded once to f32.
RopeTable rope_table(int64_t head_dim, int64_t max_positions, double theta, const RopeScaling& scaling,
                     Device device = Device::cpu());

// x [B, S, H, D] -> rotated copy. positions [B, S] (i32/i64) gives each
// token's position (restarting per packed document); undefined means 0..S-1.
// inverse = true rotates by -angle: the backward of the forward rotation.
Tensor rope(const Tensor& x, const RopeTable& table, const Tensor& positions, RopeStyle style, bool inverse = false);

using RopeKernel = void(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                        const Tensor& positions, RopeStyle style, bool inverse);
inline Op<RopeKernel> rope_kernels{"rope"};

}  // namespace titan::ops
