#include "titan/ops/rope.h"

#include "titan/core/trace_context.h"

#include <cmath>
#include <numbers>
#include <vector>

#include "titan/ops/checks.h"

namespace titan::ops {

RopeTable rope_table(int64_t head_dim, int64_t max_positions, double theta, const RopeScaling& scaling, Device device) {
  TITAN_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope_table: head_dim must be even and positive, got {}", head_dim);
  TITAN_CHECK(max_positions > 0 && theta > 0.0, "rope_table: needs max_positions > 0 and theta > 0 (got {}, {})",
              max_positions, theta);
  const int64_t half = head_dim / 2;
  std::vector<double> frequency(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
    if (scaling.factor > 0.0) {
      // Llama 3.1: keep high frequencies, divide low ones by `factor`, blend between.
      const double old_context = static_cast<double>(scaling.original_max_position);
      const double low_freq_wavelen = old_context / scaling.low_freq_factor;
      const double high_freq_wavelen = old_context / scaling.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f /= scaling.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth =
            (old_context / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1.0 - smooth) * f / scaling.factor + smooth * f;
      }
    }
    frequency[static_cast<size_t>(i)] = f;
  }
  std::vector<float> cos_values(static_cast<size_t>(max_positions * half)), sin_values(cos_values.size());
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * frequency[static_cast<size_t>(i)];
      cos_values[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(angle));
      sin_values[static_cast<size_t>(p * half + i)] = static_cast<float>(std::sin(angle));
    }
  }
  return RopeTable{Tensor::from_floats(cos_values, {max_positions, half}).to(device),
                   Tensor::from_floats(sin_values, {max_positions, half}).to(device)};
}

Tensor rope(const Tensor& x, const RopeTable& table, const Tensor& positions, RopeStyle style, bool inverse) {
  const trace::OpScope op_scope("rope");
  check_defined("rope", x, "x");
  check_rank("rope", x, 4, "x [B, S, H, D]");
  TITAN_CHECK(table.cos.defined() && table.cos.size(1) * 2 == x.size(3), "rope: table for head_dim {} applied to x {}",
              table.cos.defined() ? table.cos.size(1) * 2 : 0, shape_str(x.shape()));
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
