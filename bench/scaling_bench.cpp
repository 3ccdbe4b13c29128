#include "bench/scaling_bench.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/json_report.h"
#include "bench/peer_process.h"
#include "bench/timing.h"
#include "bench/training_jobs.h"
#include "titan/core/error.h"

namespace titan::bench {
namespace {

namespace fs = std::filesystem;

ScalingRow measure(const ScalingBenchOptions& o, int ranks, const fs::path& data, const fs::path& folder) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = static_cast<int>(std::max(1u, cores / static_cast<unsigned>(ranks)));
  run_training_job(
      fmt::format("{}-rank", ranks), ranks, threads, folder,
      fmt::format("--config {} --training.dataset_path {} --model.tokenizer_path {}/tokenizer.json "
                  "--training.steps {} --training.seq_len {} --training.local_batch_size {} --validation.enable false "
                  "--metrics.log_freq 1 --metrics.peak_tflops 1 --parallelism.data_parallel_shard_degree {}{}",
                  shared_file(o.config), data.string(), data.string(), o.warmup + o.steps, o.seq_len, o.local_batch,
                  ranks, o.expert_parallel ? fmt::format(" --parallelism.expert_parallel_degree {}", ranks) : ""));
  std::vector<double> tps, comm, exposed;
  for (const nlohmann::json& m : metrics_after(folder, o.warmup)) {
    tps.push_back(m["tokens_per_second"]);
    comm.push_back(m["comm_busy_seconds"].get<double>() / m["step_seconds"].get<double>());
    const double busy = m["comm_busy_seconds"];
    exposed.push_back(busy > 0 ? m["comm_exposed_seconds"].get<double>() / busy : 0.0);
  }
  return {ranks, median(tps), median(comm), median(exposed)};
}

}  // namespace

std::vector<ScalingRow> measure_scaling(const ScalingBenchOptions& o) {
  const fs::path root = fs::temp_directory_path() / "titan_bench_scaling";
  const fs::path data = bench_corpus();
  std::printf("%6s %18s %14s %14s %22s\n", "ranks", "tokens/s per rank", "tokens/s all", "comm / step",
              "exposed / comm time");
  std::vector<ScalingRow> rows;
  for (int ranks : o.ranks) {
    const ScalingRow r = measure(o, ranks, data, root / fmt::format("ranks{}", ranks));
    std::printf("%6d %18.0f %14.0f %13.1f%% %21.1f%%\n", r.ranks, r.tokens_per_second_per_rank,
                r.ranks * r.tokens_per_second_per_rank, 100.0 * r.comm_share, 100.0 * r.exposed_share);
    rows.push_back(r);
  }
  return rows;
}

nlohmann::json scaling_json(const std::vector<ScalingRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const ScalingRow& r : rows) {
    out.push_back({{"ranks", r.ranks},
                   {"tokens_per_second_per_rank", r.tokens_per_second_per_rank},
                   {"comm_share_of_step", r.comm_share},
                   {"exposed_share_of_comm", r.exposed_share}});
  }
  return out;
}

int run_scaling_bench(const ScalingBenchOptions& o) {
  std::printf(
      "titan bench scaling: llama3 debugmodel, FSDP over N ranks, seq %lld x batch %lld per rank, median of "
      "%d steps after %d warm-up, %u cores\n\n",
      static_cast<long long>(o.seq_len), static_cast<long long>(o.local_batch), o.steps, o.warmup,
      std::thread::hardware_concurrency());
  write_json_report(o.json_path, scaling_json(measure_scaling(o)));
  return 0;
}

}  // namespace titan::bench
