#include "bench/pipeline_bench.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/json_report.h"
#include "bench/peer_process.h"
#include "bench/timing.h"
#include "bench/training_jobs.h"
#include "titan/core/error.h"
#include "titan/parallel/pipeline_schedule.h"
#include "titan/parallel/pipeline_schedule_check.h"

namespace titan::bench {
namespace {

namespace fs = std::filesystem;
namespace pipeline = parallel::pipeline;

struct ScheduleRow {
  std::string schedule;
  int stages = 0;
  double theoretical_bubble = 0, measured_bubble = 0, tokens_per_second = 0;
  std::vector<double> rank_peak_memory_gib;
};

// A Llama whose layers are the bulk of each stage's work (dim 512, 16 layers,
// the corpus's 2048-token vocabulary), as a Hugging Face config.json.
fs::path write_model_config(const fs::path& root, int layers) {
  const fs::path path = root / "config.json";
  std::ofstream(path) << fmt::format(
      R"({{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
  "intermediate_size": 1536, "num_hidden_layers": {}, "num_attention_heads": 8, "num_key_value_heads": 4,
  "vocab_size": 2048, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 2048,
  "tie_word_embeddings": false}})",
      layers);
  return path;
}

ScheduleRow measure(const PipelineBenchOptions& o, const std::string& schedule, const fs::path& root,
                    const fs::path& model, const fs::path& data) {
  ScheduleRow row;
  row.schedule = schedule;
  row.stages = o.ranks * pipeline::stages_per_rank(schedule);
  const pipeline::Schedule plan = pipeline::generate_schedule(schedule, o.ranks, row.stages, o.microbatches);
  row.theoretical_bubble = pipeline::simulate_schedule(plan).bubble_fraction;

  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = static_cast<int>(std::max(1u, cores / static_cast<unsigned>(o.ranks)));
  const fs::path folder = root / schedule;
  // No first/last-stage discounts: every stage gets the same layers (the
  // embedding and the head ride along with the first and last).
  run_training_job(
      schedule, o.ranks, threads, folder,
      fmt::format("--config {} --model.hf_config {} --training.dataset_path {} --model.tokenizer_path "
                  "{}/tokenizer.json --training.steps {} --training.seq_len {} --training.local_batch_size {} "
                  "--validation.enable false --metrics.log_freq 1 --metrics.peak_tflops 1 "
                  "--parallelism.pipeline_parallel_degree {} --parallelism.data_parallel_shard_degree 1 "
                  "--parallelism.pipeline_parallel_schedule {} --parallelism.pipeline_parallel_microbatch_size 1 "
                  "--parallelism.pipeline_parallel_first_stage_less_layers 0 "
                  "--parallelism.pipeline_parallel_last_stage_less_layers 0",
                  shared_file("configs/llama3_debug.toml"), model.string(), data.string(), data.string(),
                  o.warmup + o.steps, o.seq_len, o.microbatches, o.ranks, schedule));
  std::vector<double> bubble, tps;
  std::vector<std::vector<double>> memory(static_cast<size_t>(o.ranks));
  for (const nlohmann::json& m : metrics_after(folder, o.warmup)) {
    bubble.push_back(m["pipeline_bubble"]);
    // Per device: every pipeline rank shares the step's tokens.
    tps.push_back(m["tokens_per_second"].get<double>() * o.ranks);
    const std::vector<double> peaks = m["pipeline_rank_peak_memory_gib"];
    for (size_t r = 0; r < peaks.size() && r < memory.size(); ++r) memory[r].push_back(peaks[r]);
  }
  row.measured_bubble = median(bubble);
  row.tokens_per_second = median(tps);
  for (const std::vector<double>& peaks : memory) row.rank_peak_memory_gib.push_back(median(peaks));
  return row;
}

}  // namespace

int run_pipeline_bench(const PipelineBenchOptions& o) {
  std::printf(
      "titan bench pipeline: llama (dim 512, %d layers), %d pipeline ranks x %d micro-batches of 1 x %lld tokens, "
      "median of %d steps after %d warm-up, %u cores%s\n"
      "theoretical bubble: the schedule simulated with forward = input-gradient = weight-gradient = 1; measured: "
      "each rank's share of the pipeline passes outside forward/backward compute, averaged over ranks\n\n",
      o.layers, o.ranks, o.microbatches, static_cast<long long>(o.seq_len), o.steps, o.warmup,
      std::thread::hardware_concurrency(),
      std::thread::hardware_concurrency() < static_cast<unsigned>(o.ranks)
          ? " (more ranks than cores: ranks share cores, so compute stretches and the measured bubble is a rough one)"
          : "");
  const fs::path root = fs::temp_directory_path() / "titan_bench_pipeline";
  fs::create_directories(root);
  const fs::path model = write_model_config(root, o.layers);
  const fs::path data = bench_corpus();
  std::printf("%-22s %7s %13s %13s %12s   %s\n", "schedule", "stages", "bubble theory", "bubble meas.", "tokens/s",
              "peak memory per rank (MiB)");
  nlohmann::json results = nlohmann::json::array();
  double one_f_one_b = -1, zbv = -1;
  for (const std::string& schedule : o.schedules) {
    const ScheduleRow r = measure(o, schedule, root, model, data);
    std::string peaks;
    for (double gib : r.rank_peak_memory_gib) peaks += fmt::format("{:7.1f}", gib * 1024.0);
    std::printf("%-22s %7d %12.1f%% %12.1f%% %12.0f   %s\n", r.schedule.c_str(), r.stages, 100.0 * r.theoretical_bubble,
                100.0 * r.measured_bubble, r.tokens_per_second, peaks.c_str());
    std::fflush(stdout);
    if (schedule == "1F1B") one_f_one_b = r.measured_bubble;
    if (schedule == "ZBVZeroBubble") zbv = r.measured_bubble;
    results.push_back({{"schedule", r.schedule},
                       {"stages", r.stages},
                       {"theoretical_bubble", r.theoretical_bubble},
                       {"measured_bubble", r.measured_bubble},
                       {"tokens_per_second", r.tokens_per_second},
                       {"rank_peak_memory_gib", r.rank_peak_memory_gib}});
  }
  if (one_f_one_b > 0 && zbv >= 0) {
    std::printf("\nZBVZeroBubble's measured bubble is %.2f of 1F1B's (target <= 0.50: %s)\n", zbv / one_f_one_b,
                zbv <= 0.5 * one_f_one_b ? "met" : "missed");
  }
  write_json_report(o.json_path, {{"ranks", o.ranks}, {"microbatches", o.microbatches}, {"schedules", results}});
  return 0;
}

}  // namespace titan::bench
