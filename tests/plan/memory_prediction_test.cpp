// The planner's memory prediction (plan::predict_memory) against what a real
// job of the same layout allocates: for a few CPU layouts of the llama3 debug
// model, the job `titan plan` would emit for the layout (plan::layout_job_toml)
// runs three steps under `titan train` (mpirun for several ranks), and the
// allocator's peak it records in metrics.jsonl is set beside the prediction.
// The prediction is the trainer's own pre-flight estimate, the largest of the
// moments a step passes through (models/memory_estimate.cpp); issue 33 asks
// for it within 5% of the measured peak, which these layouts meet (0.99-1.02
// when written).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "titan/parallel/pipeline_schedule.h"
#include "titan/plan/cost_model.h"
#include "titan/plan/device_profile.h"
#include "titan/plan/layout.h"

namespace titan::plan {
namespace memory_prediction_test {

namespace fs = std::filesystem;

const fs::path& memory_prediction_workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "plan_memory_prediction_test";
  return dir;
}

// Runs a shell command with its output in `log`; the output on failure.
void memory_prediction_run(const std::string& command, const fs::path& log) {
  const int status = std::system((command + " > " + log.string() + " 2>&1").c_str());
  std::ifstream in(log);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(status, 0) << command << "\n" << output;
}

// The largest per-step peak of any rank the metrics show: rank 0's own, and
// the per-rank arrays pipeline and context parallelism record (only rank 0
// writes metrics.jsonl; FSDP and TP ranks hold the same shapes).
double memory_prediction_measured_bytes(const fs::path& metrics) {
  double peak_gib = 0.0;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (!record.contains("step")) continue;
    for (const auto& [key, value] : record.items()) {
      if (key != "peak_memory_gib" && !key.ends_with("rank_peak_memory_gib")) continue;
      if (value.is_number()) peak_gib = std::max(peak_gib, value.get<double>());
      if (value.is_array()) {
        for (const auto& rank : value) peak_gib = std::max(peak_gib, rank.get<double>());
      }
    }
  }
  return peak_gib * 1024.0 * 1024.0 * 1024.0;
}

struct MemoryPredictionCase {
  const char* name;
  int ranks;
  int64_t dp_shard, tp, pp;
  const char* schedule;
};

// Names the case in test listings (gtest would print its bytes).
void PrintTo(const MemoryPredictionCase& c, std::ostream* out) { *out << c.name; }

class PredictedMemoryAgainstJobs : public ::testing::TestWithParam<MemoryPredictionCase> {
 protected:
  static void SetUpTestSuite() {
    fs::create_directories(memory_prediction_workdir());
    const fs::path data = memory_prediction_workdir() / "data";
    if (fs::exists(data / "manifest.json")) return;
    memory_prediction_run(fmt::format("{} data prepare --input /usr/share/games/fortunes/computers --format fortune "
                                      "--train-tokenizer 512 --output {}",
                                      TITAN_CLI_PATH, data.string()),
                          memory_prediction_workdir() / "prepare.log");
  }
};

TEST_P(PredictedMemoryAgainstJobs, IsWithin5PercentOfTheMeasuredPeak) {
  const MemoryPredictionCase& c = GetParam();
  PlanRequest request;
  request.model = "llama3";
  request.flavor = "debugmodel";
  request.devices = c.ranks;
  request.devices_per_node = c.ranks;
  request.seq_len = 256;
  request.global_batch_tokens = 4 * request.seq_len;
  request.compute_dtype = DType::bf16;
  Layout layout;
  layout.dp_shard = c.dp_shard;
  layout.tp = c.tp;
  layout.pp = c.pp;
  layout.local_batch_size = 4 / c.dp_shard;
  if (c.pp > 1) {
    layout.pipeline_schedule = c.schedule;
    layout.stages_per_rank = parallel::pipeline::stages_per_rank(c.schedule);
  }
  // One rank gets the machine's threads; several share it one thread each, as `titan bench plan` runs them.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = c.ranks == 1 ? cores : 1;

  const fs::path dump = memory_prediction_workdir() / c.name;
  fs::remove_all(dump);
  const fs::path toml = memory_prediction_workdir() / (std::string(c.name) + ".toml");
  std::ofstream(toml) << layout_job_toml(layout, request);
  const fs::path data = memory_prediction_workdir() / "data";
  const std::string train = fmt::format(
      "{} train --config {} --job.dump_folder {} --training.dataset_path {} --model.tokenizer_path "
      "{}/tokenizer.json --training.steps 3 --metrics.progress false",
      TITAN_CLI_PATH, toml.string(), dump.string(), data.string(), data.string());
  const std::string command = c.ranks == 1 ? fmt::format("OMP_NUM_THREADS={} {}", threads, train)
                                           : fmt::format(
                                                 "{} --allow-run-as-root --oversubscribe -np {} -x OMP_NUM_THREADS=1 "
                                                 "-x OMPI_MCA_mpi_yield_when_idle=1 {}",
                                                 TITAN_MPIEXEC, c.ranks, train);
  ASSERT_NO_FATAL_FAILURE(memory_prediction_run(command, memory_prediction_workdir() / (std::string(c.name) + ".log")));
  const double measured = memory_prediction_measured_bytes(dump / "metrics.jsonl");
  ASSERT_GT(measured, 0.0);

  // Memory needs no speeds: the CPU profile's cores and threads are what the estimate reads.
  DeviceProfile cpu;
  cpu.name = "cpu";
  cpu.cores = cores;
  cpu.threads_per_rank = threads;
  cpu.memory_bytes = 16.0 * 1024 * 1024 * 1024;
  const train::MemoryBudget predicted = predict_memory(model_under_plan(request), request, layout, cpu);
  const double ratio = predicted.needed_bytes / measured;
  std::printf("%-10s measured %8.2f MiB, predicted %8.2f MiB (%.3fx): %s\n", c.name, measured / 1048576.0,
              predicted.needed_bytes / 1048576.0, ratio, predicted.breakdown.c_str());
  EXPECT_NEAR(ratio, 1.0, 0.05) << layout.describe() << ": " << predicted.breakdown;
}

INSTANTIATE_TEST_SUITE_P(CpuLayouts, PredictedMemoryAgainstJobs,
                         ::testing::Values(MemoryPredictionCase{"plain", 1, 1, 1, 1, ""},
                                           MemoryPredictionCase{"fsdp2", 2, 2, 1, 1, ""},
                                           MemoryPredictionCase{"tp2", 2, 1, 2, 1, ""},
                                           MemoryPredictionCase{"pp2", 2, 1, 1, 2, "1F1B"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace memory_prediction_test
}  // namespace titan::plan
