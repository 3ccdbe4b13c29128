// CPU im2col for ops::conv2d (ops/conv2d.h): pure copies of input values (or
// zeros where a window reaches into the padding), so bf16 stays exact and the
// arithmetic all happens in the GEMM. Parallel over the columns' rows, each
// written by one task: no sums here, nothing depends on the thread count.
#include "titan/ops/conv2d.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

void im2col_kernel(const Tensor& cols, const Tensor& x, const Im2colWindow& w) {
  const int64_t channels = x.size(1), height = x.size(2), width = x.size(3);
  const int64_t taps = w.kernel_h * w.kernel_w, k = channels * taps, n = w.rows * w.out_w;
  dispatch_float("conv2d_im2col", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* image = x.data<T>() + w.image * channels * height * width;
    T* out = cols.data<T>();
    parallel_for(k, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t c = r / taps, u = (r / w.kernel_w) % w.kernel_h, v = r % w.kernel_w;
        const T* plane = image + c * height * width;
        T* dst = out + r * n;
        for (int64_t i = 0; i < w.rows; ++i) {
          const int64_t src_row = (w.first_row + i) * w.stride + u - w.padding.top;
          T* line = dst + i * w.out_w;
          if (src_row < 0 || src_row >= height) {
            for (int64_t j = 0; j < w.out_w; ++j) line[j] = from_f32<T>(0.0f);
            continue;
          }
          const T* src = plane + src_row * width;
          for (int64_t j = 0; j < w.out_w; ++j) {
            const int64_t src_col = j * w.stride + v - w.padding.left;
            line[j] = src_col >= 0 && src_col < width ? src[src_col] : from_f32<T>(0.0f);
          }
        }
      }
    });
    if (w.ones_row) {
      T* ones = out + k * n;
      for (int64_t j = 0; j < n; ++j) ones[j] = from_f32<T>(1.0f);
    }
  });
}

}  // namespace

void register_conv2d() { im2col_kernels.set_kernel(DeviceType::cpu, im2col_kernel); }

}  // namespace titan::ops::cpu::TITAN_ISA
