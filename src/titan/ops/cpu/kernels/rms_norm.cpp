// CPU RMSNorm. Forward: one row per iteration, rows in parallel, f32 math and
// one rounding of y. Backward: with xhat = x * rstd,
//   dx = rstd * (dy*w - xhat * mean(dy*w*xhat)),   dw = sum over rows of dy*xhat.
// dw is accumulated per fixed block of kRowBlock rows and the blocks are summed
// in order, so it does not depend on the thread count.
#include <cmath>
#include <vector>

#include "titan/ops/rms_norm.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

constexpr int64_t kRowBlock = 32;

void rms_norm_kernel(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight, float eps) {
  dispatch_float("rms_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    const T* in = x.data<T>();
    const T* w = weight.data<T>();
    T* out = y.data<T>();
    float* r = rstd.data<float>();
    parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const T* xr = in + row * dim;
        float sum_squares = 0.0f;
#pragma omp simd reduction(+ : sum_squares)
        for (int64_t c = 0; c < dim; ++c) sum_squares += to_f32(xr[c]) * to_f32(xr[c]);
        const float inv = 1.0f / std::sqrt(sum_squares / static_cast<float>(dim) + eps);
        r[row] = inv;
        T* yr = out + row * dim;
        for (int64_t c = 0; c < dim; ++c) yr[c] = from_f32<T>(to_f32(xr[c]) * inv * to_f32(w[c]));
      }
    });
  });
}

void rms_norm_backward_kernel(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_y, const Tensor& x,
                              const Tensor& weight, const Tensor& rstd) {
  dispatch_float("rms_norm_backward", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
    const T* in = x.data<T>();
    const T* w = weight.data<T>();
    const T* dy = grad_y.data<T>();
    const float* r = rstd.data<float>();
    T* dx = grad_x.data<T>();
    std::vector<float> partial(static_cast<size_t>(blocks * dim), 0.0f);
    parallel_for(blocks, 1, [&](int64_t first_block, int64_t end_block) {
      for (int64_t block = first_block; block < end_block; ++block) {
        float* dw = partial.data() + block * dim;
        for (int64_t row = block * kRowBlock; row < std::min(rows, (block + 1) * kRowBlock); ++row) {
          const T* xr = in + row * dim;
          const T* dyr = dy + row * dim;
          const float inv = r[row];
          float dot = 0.0f;  // sum(dy * w * xhat)
#pragma omp simd reduction(+ : dot)
          for (int64_t c = 0; c < dim; ++c) {
            const float xhat = to_f32(xr[c]) * inv;
            const float g = to_f32(dyr[c]);
            dot += g * to_f32(w[c]) * xhat;
            dw[c] += g * xhat;
          }
          const float mean_dot = dot / static_cast<float>(dim);
          T* dxr = dx + row * dim;
          for (int64_t c = 0; c < dim; ++c) {
            const float xhat = to_f32(xr[c]) * inv;
            dxr[c] = from_f32<T>(inv * (to_f32(dyr[c]) * to_f32(w[c]) - xhat * mean_dot));
          }
        }
      }
    });
    T* gw = grad_weight.data<T>();
    parallel_for(dim, 64, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        float total = 0.0f;
        for (int64_t block = 0; block < blocks; ++block) total += partial[static_cast<size_t>(block * dim + c)];
        gw[c] = from_f32<T>(total);
      }
    });
  });
}

}  // namespace

void register_rms_norm() {
  rms_norm_kernels.set_kernel(DeviceType::cpu, rms_norm_kernel);
  rms_norm_backward_kernels.set_kernel(DeviceType::cpu, rms_norm_backward_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
