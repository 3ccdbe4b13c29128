#include "titan/ops/rope.h"

#include "titan/core/trace_context.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "titan/ops/checks.h"

namespace titan::ops {

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

namespace rope_scaling_detail {

// YaRN's ramp between extrapolated (fast, i below `low`) and interpolated
// (slow, i above `high`) dimensions: the dimension at which a frequency turns
// `rotations` times over the original context.
double yarn_correction_dim(double rotations, int64_t dim, double base, double original) {
  return static_cast<double>(dim) * std::log(original / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

void check_scaling(const RopeScaling& s, int64_t rotary_dim) {
  const char* name = rope_scaling_type_name(s.type);
  if (s.type == RopeScalingType::none) return;
  if (s.type != RopeScalingType::longrope) {
    TITAN_CHECK(s.factor > 0.0 && std::isfinite(s.factor), "rope_table: {} scaling needs a factor > 0, got {}", name,
                s.factor);
  }
  TITAN_CHECK(s.original_max_position > 0, "rope_table: {} scaling needs original_max_position > 0, got {}", name,
              s.original_max_position);
  if (s.type == RopeScalingType::dynamic) {
    TITAN_CHECK(rotary_dim > 2, "rope_table: dynamic scaling needs a rotary dim > 2, got {}", rotary_dim);
  }
  if (s.type == RopeScalingType::longrope) {
    for (const auto* factors : {&s.short_factor, &s.long_factor}) {
      TITAN_CHECK(static_cast<int64_t>(factors->size()) == rotary_dim / 2,
                  "rope_table: longrope needs short_factor and long_factor of rotary_dim / 2 = {} entries, got {}",
                  rotary_dim / 2, factors->size());
    }
  }
  if (s.type == RopeScalingType::llama3) {
    TITAN_CHECK(s.high_freq_factor > s.low_freq_factor,
                "rope_table: llama3 scaling needs high_freq_factor {} > low_freq_factor {}", s.high_freq_factor,
                s.low_freq_factor);
  }
}

}  // namespace rope_scaling_detail

std::vector<double> rope_inverse_frequencies(int64_t rotary_dim, int64_t max_positions, double theta,
                                             const RopeScaling& scaling) {
  TITAN_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "rope_table: the rotary dim must be even and positive, got {}",
              rotary_dim);
  TITAN_CHECK(max_positions > 0 && theta > 0.0, "rope_table: needs max_positions > 0 and theta > 0 (got {}, {})",
              max_positions, theta);
  rope_scaling_detail::check_scaling(scaling, rotary_dim);
  const int64_t half = rotary_dim / 2;
  const double dim = static_cast<double>(rotary_dim);
  const double original = static_cast<double>(scaling.original_max_position);
  double base = theta;
  if (scaling.type == RopeScalingType::dynamic && max_positions > scaling.original_max_position) {
    // NTK-aware: the base for a sequence of max_positions tokens.
    const double length = static_cast<double>(max_positions);
    base = theta * std::pow(scaling.factor * length / original - (scaling.factor - 1.0), dim / (dim - 2.0));
  }
  double ramp_low = 0.0, ramp_high = 0.0;
  if (scaling.type == RopeScalingType::yarn) {
    ramp_low = rope_scaling_detail::yarn_correction_dim(scaling.beta_fast, rotary_dim, theta, original);
    ramp_high = rope_scaling_detail::yarn_correction_dim(scaling.beta_slow, rotary_dim, theta, original);
    if (scaling.truncate) {
      ramp_low = std::floor(ramp_low);
      ramp_high = std::ceil(ramp_high);
    }
    ramp_low = std::max(ramp_low, 0.0);
    ramp_high = std::min(ramp_high, dim - 1.0);
    if (ramp_low == ramp_high) ramp_high += 0.001;  // transformers' guard against a zero-width ramp
  }
  const std::vector<double>& longrope_factors =
      max_positions > scaling.original_max_position ? scaling.long_factor : scaling.short_factor;
  std::vector<double> frequency(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(base, static_cast<double>(2 * i) / dim);
    switch (scaling.type) {
      case RopeScalingType::none:
      case RopeScalingType::dynamic:
        break;
      case RopeScalingType::linear:
        f /= scaling.factor;
        break;
      case RopeScalingType::yarn: {
        // 1 on the slow dimensions (interpolated: f / factor), 0 on the fast ones (kept).
        const double ramp = std::clamp((static_cast<double>(i) - ramp_low) / (ramp_high - ramp_low), 0.0, 1.0);
        f = f / scaling.factor * ramp + f * (1.0 - ramp);
        break;
      }
      case RopeScalingType::longrope:
        f = 1.0 / (longrope_factors[static_cast<size_t>(i)] * std::pow(base, static_cast<double>(2 * i) / dim));
        break;
      case RopeScalingType::llama3: {
        // Llama 3.1: keep high frequencies, divide low ones by `factor`, blend between.
        const double low_freq_wavelen = original / scaling.low_freq_factor;
        const double high_freq_wavelen = original / scaling.high_freq_factor;
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen > low_freq_wavelen) {
          f /= scaling.factor;
        } else if (wavelen >= high_freq_wavelen) {
          const double smooth =
              (original / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor);
          f = (1.0 - smooth) * f / scaling.factor + smooth * f;
        }
        break;
      }
    }
    frequency[static_cast<size_t>(i)] = f;
  }
  return frequency;
}

double rope_attention_factor(const RopeScaling& scaling) {
  if (scaling.attention_factor > 0.0 &&
      (scaling.type == RopeScalingType::yarn || scaling.type == RopeScalingType::longrope)) {
    return scaling.attention_factor;
  }
  if (scaling.type == RopeScalingType::yarn) {
    if (scaling.mscale > 0.0 && scaling.mscale_all_dim > 0.0) {
      return yarn_get_mscale(scaling.factor, scaling.mscale) / yarn_get_mscale(scaling.factor, scaling.mscale_all_dim);
    }
    return yarn_get_mscale(scaling.factor);
  }
  if (scaling.type == RopeScalingType::longrope && scaling.factor > 1.0) {
    return std::sqrt(1.0 + std::log(scaling.factor) / std::log(static_cast<double>(scaling.original_max_position)));
  }
  return 1.0;
}

RopeTable rope_table(int64_t rotary_dim, int64_t max_positions, double theta, const RopeScaling& scaling,
                     Device device) {
  const std::vector<double> frequency = rope_inverse_frequencies(rotary_dim, max_positions, theta, scaling);
  const double attention = rope_attention_factor(scaling);
  const int64_t half = rotary_dim / 2;
  std::vector<float> cos_values(static_cast<size_t>(max_positions * half)), sin_values(cos_values.size());
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * frequency[static_cast<size_t>(i)];
      cos_values[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(angle) * attention);
      sin_values[static_cast<size_t>(p * half + i)] = static_cast<float>(std::sin(angle) * attention);
    }
  }
  return RopeTable{Tensor::from_floats(cos_values, {max_positions, half}).to(device),
                   Tensor::from_floats(sin_values, {max_positions, half}).to(device)};
}

Tensor rope(const Tensor& x, const RopeTable& table, const Tensor& positions, RopeStyle style, bool inverse) {
  const trace::OpScope op_scope("rope");
  check_defined("rope", x, "x");
  check_rank("rope", x, 4, "x [B, S, H, D]");
  TITAN_CHECK(table.cos.defined() && table.cos.size(1) > 0 && table.cos.size(1) * 2 <= x.size(3),
              "rope: table for a rotary dim of {} applied to x {}", table.cos.defined() ? table.cos.size(1) * 2 : 0,
              shape_str(x.shape()));
  if (positions.defined()) {
    check_dtype("rope", positions, {DType::i32, DType::i64}, "positions");
    TITAN_CHECK(positions.dim() == 2 && positions.size(0) == x.size(0) && positions.size(1) == x.size(1),
                "rope: positions {} do not match x {} ([B, S])", shape_str(positions.shape()), shape_str(x.shape()));
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (!out.device().is_meta()) {
    rope_kernels(x.device(), out, x.contiguous(), table.cos, table.sin,
                 positions.defined() ? positions.contiguous() : positions, style, inverse);
  }
  return out;
}

}  // namespace titan::ops
