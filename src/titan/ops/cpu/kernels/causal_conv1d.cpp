// CPU causal depthwise conv1d + SiLU (ops/causal_conv1d.h). Forward and the
// input gradient are gathers, one output element per (row, token, channel),
// parallel over rows x tokens; the weight gradient sums over every row and
// token per channel, parallel over channels, each in token order: the result
// does not depend on the thread count. Per-element sums in f64 (K terms).
#include <cmath>
#include <vector>

#include "titan/ops/causal_conv1d.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

struct ConvShape {
  int64_t batch, tokens, channels, width;
};

ConvShape shape_of(const Tensor& x, const Tensor& weight) { return {x.size(0), x.size(1), x.size(2), weight.size(1)}; }

std::vector<float> weights_f32(const Tensor& weight) {
  std::vector<float> w(static_cast<size_t>(weight.numel()));
  dispatch_float("causal_conv1d_silu", weight.dtype(), [&](auto tag) {
    using W = decltype(tag);
    const W* src = weight.data<W>();
    for (size_t i = 0; i < w.size(); ++i) w[i] = to_f32(src[i]);
  });
  return w;
}

// Each token's document id ([B * T]); empty without packing.
std::vector<int64_t> document_of(const Tensor& ids) {
  if (!ids.defined()) return {};
  std::vector<int64_t> out(static_cast<size_t>(ids.numel()));
  if (ids.dtype() == DType::i32) {
    const int32_t* src = ids.data<int32_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = src[i];
  } else {
    const int64_t* src = ids.data<int64_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = src[i];
  }
  return out;
}

// The first source token of token t in row b that may feed it: t - (K - 1),
// moved past the start of t's document.
template <typename Docs>
int64_t first_source(const ConvShape& s, const Docs& docs, int64_t b, int64_t t) {
  int64_t first = std::max<int64_t>(0, t - (s.width - 1));
  if (!docs.empty()) {
    const int64_t* row = docs.data() + b * s.tokens;
    while (first < t && row[first] != row[t]) ++first;
  }
  return first;
}

template <typename T>
double pre_activation(const ConvShape& s, const T* x, const float* w, int64_t b, int64_t t, int64_t first, int64_t c) {
  double sum = 0.0;
  for (int64_t src = first; src <= t; ++src) {
    const int64_t j = src - t + (s.width - 1);
    sum += static_cast<double>(w[c * s.width + j]) * to_f32(x[(b * s.tokens + src) * s.channels + c]);
  }
  return sum;
}

void causal_conv1d_kernel(const Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& document_ids) {
  const ConvShape s = shape_of(x, weight);
  const std::vector<float> w = weights_f32(weight);
  const std::vector<int64_t> docs = document_of(document_ids);
  dispatch_float("causal_conv1d_silu", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xd = x.data<T>();
    T* yd = y.data<T>();
    parallel_for(s.batch * s.tokens, 16, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / s.tokens, t = row % s.tokens, first = first_source(s, docs, b, t);
        for (int64_t c = 0; c < s.channels; ++c) {
          const double u = pre_activation(s, xd, w.data(), b, t, first, c);
          yd[row * s.channels + c] = from_f32<T>(static_cast<float>(u / (1.0 + std::exp(-u))));
        }
      }
    });
  });
}

void causal_conv1d_backward_kernel(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_y,
                                   const Tensor& x, const Tensor& weight, const Tensor& document_ids) {
  const ConvShape s = shape_of(x, weight);
  const std::vector<float> w = weights_f32(weight);
  const std::vector<int64_t> docs = document_of(document_ids);
  const int64_t rows = s.batch * s.tokens;
  // d pre-activation, f64, and each token's first source.
  std::vector<double> du(static_cast<size_t>(rows * s.channels));
  std::vector<int64_t> first(static_cast<size_t>(rows));
  std::vector<double> dw(static_cast<size_t>(s.channels * s.width), 0.0);
  dispatch_float("causal_conv1d_silu_backward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xd = x.data<T>();
    const T* gy = grad_y.data<T>();
    T* gx = grad_x.data<T>();
    parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / s.tokens, t = row % s.tokens;
        first[row] = first_source(s, docs, b, t);
        for (int64_t c = 0; c < s.channels; ++c) {
          const double u = pre_activation(s, xd, w.data(), b, t, first[row], c), sig = 1.0 / (1.0 + std::exp(-u));
          du[row * s.channels + c] = to_f32(gy[row * s.channels + c]) * sig * (1.0 + u * (1.0 - sig));
        }
      }
    });
    // dx[src] sums du[t] w[t - src + ...] over the tokens t in [src, src + K) that src feeds.
    parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / s.tokens, src = row % s.tokens;
        const int64_t last = std::min(s.tokens - 1, src + s.width - 1);
        for (int64_t c = 0; c < s.channels; ++c) {
          double sum = 0.0;
          for (int64_t t = src; t <= last; ++t) {
            const int64_t r = b * s.tokens + t;
            if (first[r] > src) continue;  // another document, or src out of t's reach
            sum += du[r * s.channels + c] * w[c * s.width + (src - t + s.width - 1)];
          }
          gx[row * s.channels + c] = from_f32<T>(static_cast<float>(sum));
        }
      }
    });
    parallel_for(s.channels, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t b = r / s.tokens, t = r % s.tokens;
          const double d = du[r * s.channels + c];
          for (int64_t src = first[r]; src <= t; ++src) {
            dw[c * s.width + (src - t + s.width - 1)] += d * to_f32(xd[(b * s.tokens + src) * s.channels + c]);
          }
        }
      }
    });
  });
  dispatch_float("causal_conv1d_silu_backward", grad_weight.dtype(), [&](auto tag) {
    using W = decltype(tag);
    W* gw = grad_weight.data<W>();
    for (size_t i = 0; i < dw.size(); ++i) gw[i] = from_f32<W>(static_cast<float>(dw[i]));
  });
}

}  // namespace

void register_causal_conv1d() {
  causal_conv1d_kernels.set_kernel(DeviceType::cpu, causal_conv1d_kernel);
  causal_conv1d_backward_kernels.set_kernel(DeviceType::cpu, causal_conv1d_backward_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
