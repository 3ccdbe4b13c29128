#include "bench/ops_bench.h"

#include <cstdio>

#include "bench/timing.h"
#include "titan/core/generator.h"
#include "titan/ops/gemm.h"
#include "titan/ops/random.h"

namespace titan::bench {

int run_ops_bench(const OpsBenchOptions& options) {
  Generator generator(0);
  for (DType dtype : {DType::f32, DType::bf16}) {
    const int64_t n = options.quick ? 512 : 2048;
    Tensor a = Tensor::empty({n, n}, dtype), b = Tensor::empty({n, n}, dtype), c = Tensor::empty({n, n});
    ops::normal_(a, 0, 1, generator);
    ops::normal_(b, 0, 1, generator);
    const double seconds = median_seconds([&] { ops::gemm(a, b, c); }, 2, options.repeats);
    std::printf("gemm %s %lldx%lldx%lld: %.1f GFLOP/s\n", dtype_name(dtype), static_cast<long long>(n),
                static_cast<long long>(n), static_cast<long long>(n), 2.0 * n * n * n / seconds / 1e9);
  }
  return 0;
}

}  // namespace titan::bench
