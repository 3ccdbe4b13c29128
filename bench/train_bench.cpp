#include "bench/train_bench.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/busy_cores.h"
#include "bench/json_report.h"
#include "bench/peer_process.h"
#include "titan/models/model_spec.h"
#include "titan/ops/cpu/isa.h"
#include "titan/train/device_peak.h"
#include "titan/train/random_batches.h"
#include "titan/train/trainer.h"

namespace titan::bench {

double titan_median_train_step(const std::string& model, const TrainBenchOptions& o, const std::string& dtype) {
  train::JobConfig config;
  config.model.name = model;
  config.model.vocab_size = o.vocab;
  config.training.seq_len = o.seq_len;
  config.training.local_batch_size = o.batch;
  config.training.steps = o.warmup + o.steps;
  config.training.mixed_precision_param = dtype;
  config.metrics.peak_tflops = 1.0;
  config.metrics.log_freq = 1000000;
  config.job.dump_folder = "/tmp/titan_bench_train";
  train::Trainer trainer(config, train::random_token_batches(o.batch, o.seq_len, o.vocab, 1));
  std::vector<double> seconds;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    const double s = trainer.train_step().step_seconds;
    if (step >= o.warmup) seconds.push_back(s);
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

// When titan runs a lower kernel set than the CPU has (TITAN_CPU_ISA, which
// also caps oneDNN), the peer is held to the same ISA, so both sides run what
// such a CPU would: PyTorch's own kernels (ATEN_CPU_CAPABILITY), OpenBLAS
// (OPENBLAS_CORETYPE), and no oneDNN bf16 matmul (the peer's --no-mkldnn:
// PyTorch enables it only on AVX-512 CPUs, and a capped oneDNN would refuse it).
std::string peer_isa_environment() {
  using ops::cpu::CpuIsa;
  const CpuIsa isa = ops::cpu::selected_cpu_isa();
  if (isa == CpuIsa::avx512 || !ops::cpu::cpu_supports(CpuIsa::avx512)) return "";
  if (isa == CpuIsa::avx2) return "OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ";
  return "OPENBLAS_CORETYPE=Nehalem ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 ";
}

namespace {

// Runs the PyTorch peer; returns its median step seconds, or a negative value if it could not run.
double peer_median_step(const TrainBenchOptions& o, const std::string& dtype) {
  const auto& a = models::model_config("llama3", "debugmodel", o.vocab);
  const std::string environment = peer_isa_environment();
  const std::string command = fmt::format(
      "{}/usr/bin/python3 {}{} --dim {} --layers {} --heads {} --hidden {} --vocab {} --seq {} --batch {} "
      "--steps {} --warmup {} --dtype {} --threads {}",
      environment, shared_file("bench/train_peer.py"), environment.empty() ? "" : " --no-mkldnn", a.dim(), a.n_layers(),
      a.layers.front().attention.n_heads, a.layers.front().feed_forward.hidden_dim, o.vocab, o.seq_len, o.batch,
      o.steps, o.warmup, dtype, omp_get_max_threads());
  const std::optional<nlohmann::json> result = run_peer(command, "train bench");
  return result && result->contains("median_step_seconds") ? (*result)["median_step_seconds"].get<double>() : -1.0;
}

}  // namespace

int run_train_bench(const TrainBenchOptions& o) {
  const models::DecoderConfig config = models::model_config("llama3", "debugmodel", o.vocab);
  const double tokens = static_cast<double>(o.batch * o.seq_len);
  const double flops = models::training_flops_per_token(config, o.seq_len) * tokens;
  std::printf(
      "titan bench train: llama3 debugmodel, vocab %lld, seq %lld x batch %lld, %d threads, CPU kernels %s, median "
      "of %d steps after %d warm-up\n",
      static_cast<long long>(o.vocab), static_cast<long long>(o.seq_len), static_cast<long long>(o.batch),
      omp_get_max_threads(), ops::cpu::selected_isa(), o.steps, o.warmup);
  const std::string environment = peer_isa_environment();
  if (!environment.empty())
    std::printf("the PyTorch peer is held to the same ISA: %s--no-mkldnn\n", environment.c_str());
  std::printf("\n");
  std::printf("%-6s %14s %14s %8s %12s %12s %14s\n", "dtype", "titan tok/s", "torch tok/s", "ratio", "titan TF/s",
              "GEMM peak", "of GEMM peak");
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& dtype : o.dtypes) {
    const double peak = train::measured_cpu_gemm_tflops(parse_dtype(dtype));
    const double titan_step = titan_median_train_step("llama3", o, dtype);
    const double peer_step = o.peer ? peer_median_step(o, dtype) : -1.0;
    const double titan_tps = tokens / titan_step, peer_tps = peer_step > 0 ? tokens / peer_step : 0.0;
    const double tflops = flops / titan_step / 1e12;
    std::printf("%-6s %14.0f %14.0f %7.2fx %12.3f %12.3f %13.1f%%\n", dtype.c_str(), titan_tps, peer_tps,
                peer_tps > 0 ? titan_tps / peer_tps : 0.0, tflops, peak, 100.0 * tflops / peak);
    results.push_back({{"dtype", dtype},
                       {"titan_tokens_per_second", titan_tps},
                       {"torch_tokens_per_second", peer_tps},
                       {"ratio", peer_tps > 0 ? titan_tps / peer_tps : 0.0},
                       {"titan_tflops", tflops},
                       {"gemm_peak_tflops", peak}});
  }
  if (o.busy_cores > 0) {
    // The same measurements with other processes keeping cores busy: a job
    // should lose no more than the share those cores were of the machine.
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    std::printf(
        "\nwith %d of %d cores kept busy by other processes (fair share %.0f%%; OMP_WAIT_POLICY=%s, "
        "GOMP_SPINCOUNT=%s):\n",
        o.busy_cores, cores, 100.0 * (cores - o.busy_cores) / cores, policy != nullptr ? policy : "(unset)",
        spin != nullptr ? spin : "(unset)");
    std::printf("%-6s %14s %8s %14s %8s\n", "dtype", "titan tok/s", "kept", "torch tok/s", "kept");
    for (size_t i = 0; i < o.dtypes.size(); ++i) {
      const std::string& dtype = o.dtypes[i];
      const BusyCores busy(o.busy_cores);
      const double titan_tps = tokens / titan_median_train_step("llama3", o, dtype);
      const double peer_step = o.peer ? peer_median_step(o, dtype) : -1.0;
      const double peer_tps = peer_step > 0 ? tokens / peer_step : 0.0;
      nlohmann::json& result = results[i];
      const double titan_kept = titan_tps / result["titan_tokens_per_second"].get<double>();
      const double unloaded_peer = result["torch_tokens_per_second"].get<double>();
      const double peer_kept = unloaded_peer > 0 ? peer_tps / unloaded_peer : 0.0;
      std::printf("%-6s %14.0f %7.1f%% %14.0f %7.1f%%\n", dtype.c_str(), titan_tps, 100.0 * titan_kept, peer_tps,
                  100.0 * peer_kept);
      result["busy_cores"] = o.busy_cores;
      result["titan_busy_tokens_per_second"] = titan_tps;
      result["torch_busy_tokens_per_second"] = peer_tps;
    }
  }
  write_json_report(o.json_path, results);
  return 0;
}

}  // namespace titan::bench
