// CPU softmax over the last dimension, one row per iteration, rows in
// parallel. A row whose entries are all -inf (fully masked) becomes zeros
// rather than NaN, matching what the flash attention kernel outputs.
#include <limits>

#include "titan/ops/softmax.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

void softmax_kernel(const Tensor& y, const Tensor& x) {
  dispatch_float("softmax", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t cols = x.dim() == 0 ? 1 : x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    const T* in = x.data<T>();
    T* out = y.data<T>();
    parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
      std::vector<float> exps(static_cast<size_t>(cols));
      for (int64_t r = begin; r < end; ++r) {
        const T* row = in + r * cols;
        float row_max = -std::numeric_limits<float>::infinity();
        // A compare-select (not std::max) is what GCC vectorises as a max reduction.
#pragma omp simd reduction(max : row_max)
        for (int64_t c = 0; c < cols; ++c) {
          const float v = to_f32(row[c]);
          row_max = v > row_max ? v : row_max;
        }
        if (row_max == -std::numeric_limits<float>::infinity()) {
          // Every entry -inf: zeros; but a row of NaN (the max reduction skips them) stays NaN, as in PyTorch.
          bool nan = false;
          for (int64_t c = 0; c < cols; ++c) nan = nan || std::isnan(to_f32(row[c]));
          for (int64_t c = 0; c < cols; ++c) {
            out[r * cols + c] = from_f32<T>(nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
          }
          continue;
        }
        float total = 0.0f;
#pragma omp simd reduction(+ : total)
        for (int64_t c = 0; c < cols; ++c) {
          exps[static_cast<size_t>(c)] = fast_exp(to_f32(row[c]) - row_max);
          total += exps[static_cast<size_t>(c)];
        }
        const float inverse = 1.0f / total;
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = from_f32<T>(exps[static_cast<size_t>(c)] * inverse);
      }
    });
  });
}

void softmax_backward_kernel(const Tensor& grad_x, const Tensor& grad_y, const Tensor& y) {
  dispatch_float("softmax_backward", y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t cols = y.dim() == 0 ? 1 : y.size(-1);
    const int64_t rows = cols == 0 ? 0 : y.numel() / cols;
    const T* gy = grad_y.data<T>();
    const T* out = y.data<T>();
    T* gx = grad_x.data<T>();
    parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < cols; ++c) dot += to_f32(gy[r * cols + c]) * to_f32(out[r * cols + c]);
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t i = r * cols + c;
          gx[i] = from_f32<T>(to_f32(out[i]) * (to_f32(gy[i]) - dot));
        }
      }
    });
  });
}

}  // namespace

void register_softmax() {
  softmax_kernels.set_kernel(DeviceType::cpu, softmax_kernel);
  softmax_backward_kernels.set_kernel(DeviceType::cpu, softmax_backward_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
