#include "titan/train/device_peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "titan/core/generator.h"
#include "titan/ops/gemm.h"
#include "titan/ops/random.h"

namespace titan::train {

double measured_cpu_gemm_tflops(DType dtype) {
  const int64_t n = 1536;
  Generator generator(0);
  Tensor a = Tensor::empty({n, n}), b = Tensor::empty({n, n});
  ops::normal_(a, 0, 1, generator);
  ops::normal_(b, 0, 1, generator);
  a = a.to(dtype);
  b = b.to(dtype);
  Tensor c = Tensor::empty({n, n});
  std::vector<double> seconds;
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    ops::gemm(a, b, c);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return 2.0 * static_cast<double>(n * n * n) / seconds[2] / 1e12;  // median of the last runs
}

double default_peak_tflops(Device device, DType compute_dtype) {
  if (device.is_cpu()) return measured_cpu_gemm_tflops(compute_dtype == DType::bf16 ? DType::bf16 : DType::f32);
  // Dense (not sparse) bf16 peaks of the GPUs we target; f32 runs on tensor cores as tf32 at half of it.
  const double h100_bf16 = 989.4;
  return compute_dtype == DType::bf16 ? h100_bf16 : h100_bf16 / 2;
}

}  // namespace titan::train
