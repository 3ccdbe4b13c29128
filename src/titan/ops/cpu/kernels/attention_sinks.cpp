// Attention sinks (ops/attention.h: attention_fold_sinks_ and
// attention_sinks_backward): a per-head logit that joins each query row's
// softmax as a column with no value. Both kernels work on a finished result,
// one (row, head) at a time, in f32.
#include <cmath>
#include <limits>
#include <vector>

#include "titan/ops/attention.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

// lse' = log(e^lse + e^sink) = m + log(e^(lse - m) + e^(sink - m)) with m the
// larger of the two, and out *= e^(lse - lse'). A row that saw no key
// (lse = -inf) keeps its zeros and takes lse' = sink.
template <typename T>
void fold_sinks(const Tensor& out, const Tensor& lse, const Tensor& sinks) {
  const int64_t batch = out.size(0), seq = out.size(1), heads = out.size(2), dim = out.size(3);
  T* o_data = out.data<T>();
  float* lse_data = lse.data<float>();
  const float* sink_data = sinks.data<float>();
  parallel_for(batch * seq, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / seq, i = row % seq;
      for (int64_t h = 0; h < heads; ++h) {
        float& row_lse = lse_data[(b * heads + h) * seq + i];
        const float sink = sink_data[h];
        const float m = std::max(row_lse, sink);
        if (m == -std::numeric_limits<float>::infinity()) continue;  // no key and a -inf sink: nothing to fold
        const float total = std::exp(row_lse - m) + std::exp(sink - m);
        const float folded = m + std::log(total);
        const float shrink = std::exp(row_lse - folded);  // 0 for a row with no visible key
        row_lse = folded;
        T* o = o_data + (row * heads + h) * dim;
#pragma omp simd
        for (int64_t d = 0; d < dim; ++d) o[d] = from_f32<T>(shrink * to_f32(o[d]));
      }
    }
  });
}

// d sink_h = -sum over rows of p_sink * (dO . O), p_sink = e^(sink_h - lse).
// Summed per head in f64 over a fixed row order, so the result does not
// depend on the thread count.
template <typename T>
void sinks_backward(const Tensor& grad_sinks, const Tensor& grad_out, const Tensor& out, const Tensor& lse,
                    const Tensor& sinks) {
  const int64_t batch = out.size(0), seq = out.size(1), heads = out.size(2), dim = out.size(3);
  const T* o_data = out.data<T>();
  const T* g_data = grad_out.data<T>();
  const float* lse_data = lse.data<float>();
  const float* sink_data = sinks.data<float>();
  float* result = grad_sinks.data<float>();
  parallel_for(heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) {
      double total = 0.0;
      for (int64_t row = 0; row < batch * seq; ++row) {
        const int64_t b = row / seq, i = row % seq;
        const float row_lse = lse_data[(b * heads + h) * seq + i];
        if (row_lse == -std::numeric_limits<float>::infinity()) continue;  // neither key nor sink: no weight
        const float p_sink = std::exp(sink_data[h] - row_lse);
        const T* o = o_data + (row * heads + h) * dim;
        const T* g = g_data + (row * heads + h) * dim;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < dim; ++d) dot += to_f32(o[d]) * to_f32(g[d]);
        total += static_cast<double>(p_sink) * static_cast<double>(dot);
      }
      result[h] = static_cast<float>(-total);
    }
  });
}

void attention_fold_sinks_kernel(const Tensor& out, const Tensor& lse, const Tensor& sinks) {
  dispatch_float("attention_fold_sinks_", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fold_sinks<T>(out, lse, sinks);
  });
}

void attention_sinks_backward_kernel(const Tensor& grad_sinks, const Tensor& grad_out, const Tensor& out,
                                     const Tensor& lse, const Tensor& sinks) {
  dispatch_float("attention_sinks_backward", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    sinks_backward<T>(grad_sinks, grad_out, out, lse, sinks);
  });
}

}  // namespace

void register_attention_sinks() {
  attention_fold_sinks_kernels.set_kernel(DeviceType::cpu, attention_fold_sinks_kernel);
  attention_sinks_backward_kernels.set_kernel(DeviceType::cpu, attention_sinks_backward_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
