// `titan bench ops`: GEMM throughput at the shapes training runs, against
// oneDNN's own throughput on a large square product measured in the same run,
// and flash attention forward+backward throughput and memory by sequence length.
#include "bench/ops_bench.h"

#include <omp.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/json_report.h"
#include "bench/timing.h"
#include "titan/core/allocator.h"
#include "titan/core/generator.h"
#include "titan/ops/attention.h"
#include "titan/ops/cpu/isa.h"
#include "titan/ops/gemm.h"
#include "titan/ops/random.h"

namespace titan::bench {
namespace {

Tensor random_tensor(const Shape& shape, DType dtype, Generator& generator) {
  Tensor t = Tensor::empty(shape);
  ops::normal_(t, 0.0, 1.0, generator);
  return t.to(dtype);
}

struct GemmShape {
  const char* what;
  int64_t m, k, n;
  bool transpose_a = false, transpose_b = false;
};

// GFLOP/s of C[m, n] = A[m, k] @ B[k, n], operands laid out as training has them.
double gemm_gflops(const GemmShape& s, DType dtype, int repeats, Generator& generator) {
  const Tensor a = s.transpose_a ? random_tensor({s.k, s.m}, dtype, generator).transpose(0, 1)
                                 : random_tensor({s.m, s.k}, dtype, generator);
  const Tensor b = s.transpose_b ? random_tensor({s.n, s.k}, dtype, generator).transpose(0, 1)
                                 : random_tensor({s.k, s.n}, dtype, generator);
  Tensor c = Tensor::empty({s.m, s.n});
  const double seconds = median_seconds([&] { ops::gemm(a, b, c); }, 2, repeats);
  return 2.0 * static_cast<double>(s.m) * s.k * s.n / seconds / 1e9;
}

// The shapes of one llama3 debugmodel step (dim 256, FFN 768, vocab 2048,
// 8 x 512 tokens) and of a 1B-class layer (dim 2048, FFN 8192), forward and
// backward: y = x W^T, dx = dy W, dW = dy^T x.
std::vector<GemmShape> training_shapes(bool quick) {
  std::vector<GemmShape> shapes{
      {"debug qkv/o fwd   x W^T", 4096, 256, 256, false, true},
      {"debug ffn up fwd  x W^T", 4096, 256, 768, false, true},
      {"debug ffn down fwd", 4096, 768, 256, false, true},
      {"debug ffn bwd dx  dy W", 4096, 768, 256, false, false},
      {"debug ffn bwd dW  dy^T x", 768, 4096, 256, true, false},
      {"debug output fwd", 4096, 256, 2048, false, true},
  };
  if (!quick) {
    shapes.push_back({"1B attn fwd", 4096, 2048, 2048, false, true});
    shapes.push_back({"1B ffn up fwd", 4096, 2048, 8192, false, true});
    shapes.push_back({"1B ffn down fwd", 4096, 8192, 2048, false, true});
    shapes.push_back({"1B ffn bwd dx", 4096, 8192, 2048, false, false});
    shapes.push_back({"1B ffn bwd dW", 8192, 4096, 2048, true, false});
  }
  return shapes;
}

struct AttentionResult {
  int64_t seq;
  double forward_gflops, training_gflops, extra_mib, naive_scores_mib;
};

// Causal attention, B = 1, 16 heads of 64. FLOPs: forward 4 S^2 H D / 2 (causal
// half), backward 2.5x forward. Memory: peak bytes allocated beyond the inputs
// and outputs, against what materialising the scores alone would take. With
// `sinks`, gpt-oss's attention sinks are on (same FLOPs counted: what their
// fold and gradient cost shows as a lower rate).
AttentionResult attention_case(int64_t seq, DType dtype, int repeats, Generator& generator, bool sinks = false) {
  const int64_t heads = 16, dim = 64;
  const Tensor q = random_tensor({1, seq, heads, dim}, dtype, generator);
  const Tensor k = random_tensor({1, seq, heads, dim}, dtype, generator);
  const Tensor v = random_tensor({1, seq, heads, dim}, dtype, generator);
  const Tensor grad = random_tensor({1, seq, heads, dim}, dtype, generator);
  ops::AttentionMask mask{true, 0, {}};
  if (sinks) mask.sinks = random_tensor({heads}, DType::f32, generator);
  const float scale = 0.125f;
  const double forward_flops = 4.0 * seq * seq * heads * dim / 2;
  ops::AttentionOutput out;
  const double forward = median_seconds([&] { out = ops::flash_attention(q, k, v, mask, scale); }, 1, repeats);
  const double training = median_seconds(
      [&] {
        out = ops::flash_attention(q, k, v, mask, scale);
        ops::flash_attention_backward(grad, q, k, v, out.out, out.lse, mask, scale);
      },
      0, repeats);
  // Memory of one forward + backward from a clean start: peak bytes beyond the
  // tensors that must exist (out, lse, dq, dk, dv) are the kernels' scratch.
  out = {};
  Allocator& allocator = allocator_for(DeviceType::cpu);
  const int64_t base = allocator.stats().live_bytes;
  allocator.reset_peak();
  out = ops::flash_attention(q, k, v, mask, scale);
  ops::AttentionGrads grads = ops::flash_attention_backward(grad, q, k, v, out.out, out.lse, mask, scale);
  const double outputs = static_cast<double>(4 * q.nbytes() + out.lse.nbytes());
  const double extra = static_cast<double>(allocator.stats().peak_bytes - base) - outputs;
  return {seq, forward_flops / forward / 1e9, 3.5 * forward_flops / training / 1e9, extra / (1 << 20),
          static_cast<double>(seq * seq * heads * 4) / (1 << 20)};
}

}  // namespace

int run_ops_bench(const OpsBenchOptions& options) {
  Generator generator(0);
  nlohmann::json results;
  std::printf("titan bench ops: %d threads, CPU kernels %s, median of %d runs\n\n", omp_get_max_threads(),
              ops::cpu::selected_isa(), options.repeats);
  for (DType dtype : {DType::f32, DType::bf16}) {
    const int64_t square = options.quick ? 1024 : 4096;
    const double peak = gemm_gflops({"square", square, square, square}, dtype, options.repeats, generator);
    std::printf("GEMM %s: oneDNN peak on %lld^3 = %.1f GFLOP/s\n", dtype_name(dtype), static_cast<long long>(square),
                peak);
    std::printf("  %-28s %6s %6s %6s %10s %8s\n", "shape", "M", "K", "N", "GFLOP/s", "of peak");
    nlohmann::json rows = nlohmann::json::array();
    for (const GemmShape& shape : training_shapes(options.quick)) {
      const double gflops = gemm_gflops(shape, dtype, options.repeats, generator);
      std::printf("  %-28s %6lld %6lld %6lld %10.1f %7.1f%%\n", shape.what, static_cast<long long>(shape.m),
                  static_cast<long long>(shape.k), static_cast<long long>(shape.n), gflops, 100.0 * gflops / peak);
      rows.push_back({{"shape", shape.what},
                      {"m", shape.m},
                      {"k", shape.k},
                      {"n", shape.n},
                      {"gflops", gflops},
                      {"fraction_of_peak", gflops / peak}});
    }
    results["gemm"][dtype_name(dtype)] = {{"square_peak_gflops", peak}, {"shapes", rows}};
    std::printf("\n");
  }
  for (DType dtype : {DType::f32, DType::bf16}) {
    std::printf("Flash attention %s, causal, B=1, H=16, D=64:\n", dtype_name(dtype));
    std::printf("  %6s %14s %20s %16s %22s %26s\n", "seq", "fwd GFLOP/s", "fwd+bwd GFLOP/s", "extra MiB",
                "naive scores MiB", "fwd+bwd with sinks GFLOP/s");
    nlohmann::json rows = nlohmann::json::array();
    const std::vector<int64_t> lengths =
        options.quick ? std::vector<int64_t>{256, 512} : std::vector<int64_t>{512, 1024, 2048, 4096};
    for (int64_t seq : lengths) {
      const AttentionResult r = attention_case(seq, dtype, options.repeats, generator);
      const AttentionResult with_sinks = attention_case(seq, dtype, options.repeats, generator, true);
      std::printf("  %6lld %14.1f %20.1f %16.2f %22.1f %26.1f\n", static_cast<long long>(r.seq), r.forward_gflops,
                  r.training_gflops, r.extra_mib, r.naive_scores_mib, with_sinks.training_gflops);
      rows.push_back({{"seq", r.seq},
                      {"forward_gflops", r.forward_gflops},
                      {"train_gflops", r.training_gflops},
                      {"train_gflops_with_sinks", with_sinks.training_gflops},
                      {"extra_mib", r.extra_mib},
                      {"naive_scores_mib", r.naive_scores_mib}});
    }
    results["attention"][dtype_name(dtype)] = rows;
    std::printf("\n");
  }
  if (!options.json_path.empty()) {
    write_json_report(options.json_path, results);
    std::printf("results written to %s\n", options.json_path.c_str());
  }
  return 0;
}

}  // namespace titan::bench
