#include "bench/profiler_bench.h"

#include <cstdio>
#include <filesystem>
#include <map>
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

struct ProfiledCase {
  std::string name;
  std::string executable;  // "" : this build
  std::string extra;       // job options of the case
};

// The median step time of one run, after its warm-up steps.
double run_median_step(const ProfilerBenchOptions& o, const ProfiledCase& c, const fs::path& data,
                       const fs::path& folder) {
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  run_training_job(c.name, 1, threads, folder,
                   fmt::format("--config {} --training.dataset_path {} --model.tokenizer_path {}/tokenizer.json "
                               "--training.steps {} --training.seq_len {} --training.local_batch_size {} "
                               "--validation.enable false --metrics.log_freq 1 --metrics.peak_tflops 1 {}",
                               shared_file("configs/llama3_debug.toml"), data.string(), data.string(),
                               o.warmup + o.steps, o.seq_len, o.local_batch, c.extra),
                   c.executable);
  std::vector<double> seconds;
  for (const nlohmann::json& m : metrics_after(folder, o.warmup)) seconds.push_back(m["step_seconds"]);
  return median(seconds);
}

}  // namespace

int run_profiler_bench(const ProfilerBenchOptions& o) {
  const fs::path root = fs::temp_directory_path() / "titan_bench_profiler";
  const fs::path data = bench_corpus();
  std::vector<ProfiledCase> cases;
  if (!o.baseline.empty()) {
    TITAN_CHECK(fs::exists(o.baseline), "bench profiler: --baseline {} does not exist", o.baseline);
    cases.push_back({"no profiler (built without)", o.baseline, ""});
  } else {
    std::printf(
        "bench profiler: no --baseline titan built with -DTITAN_PROFILER=OFF: that case is skipped "
        "(`make bench-profiler` builds one and passes it)\n");
  }
  cases.push_back({"profiler compiled in, off", "", ""});
  cases.push_back({"profiling every step", "", "--profiling.enable_profiling true --profiling.profile_freq 1"});
  cases.push_back(
      {"memory snapshot every step", "", "--profiling.enable_memory_snapshot true --profiling.profile_freq 1"});
  std::map<std::string, std::vector<double>> per_run;
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const ProfiledCase& c = cases[i];
      per_run[c.name].push_back(run_median_step(o, c, data, root / fmt::format("case{}", i)));
    }
  }
  const double reference = median(per_run[cases.front().name]);
  std::printf("llama3 debugmodel, seq %lld x batch %lld, %d steps after %d warm-up, %d rounds (medians)\n",
              static_cast<long long>(o.seq_len), static_cast<long long>(o.local_batch), o.steps, o.warmup, o.rounds);
  std::printf("%-30s %12s %10s   %s\n", "case", "step s", "vs first", "per-run medians");
  nlohmann::json results = nlohmann::json::array();
  for (const ProfiledCase& c : cases) {
    const double step = median(per_run[c.name]);
    std::string runs;
    for (double s : per_run[c.name]) runs += fmt::format(" {:.4f}", s);
    std::printf("%-30s %12.4f %+9.2f%%  %s\n", c.name.c_str(), step, 100.0 * (step / reference - 1.0), runs.c_str());
    results.push_back({{"case", c.name}, {"median_step_seconds", step}, {"runs", per_run[c.name]}});
  }
  write_json_report(o.json_path, {{"suite", "profiler"}, {"cases", results}});
  return 0;
}

}  // namespace titan::bench
