#include "parity_job.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_job.h"
#include "support/reference.h"

namespace titan::testing {

namespace fs = std::filesystem;

ParityJobs::ParityJobs(const std::string& folder) : dir_(fs::path(::testing::TempDir()) / folder) {
  fs::create_directories(dir_);
  prepare_test_corpus(dir_ / "data", dir_ / "prepare.log");
}

std::string ParityJobs::run(const std::string& command) const { return run_ok(command, dir_ / "last_command.log"); }

std::string ParityJobs::arguments(const std::string& name, int64_t local_batch, const std::string& extra) const {
  return fmt::format(
      " train --config {}/configs/llama3_debug.toml --job.dump_folder {} --training.dataset_path {} "
      "--model.tokenizer_path {}/tokenizer.json --training.steps {} --training.seq_len 128 "
      "--training.local_batch_size {} --training.mixed_precision_param f32 --model.document_masking false "
      "--validation.enable false --lr_scheduler.warmup_steps 2 --metrics.peak_tflops 1 --metrics.log_freq 1 {}",
      TITAN_SOURCE_DIR, (dir_ / name).string(), (dir_ / "data").string(), (dir_ / "data").string(), kParitySteps,
      local_batch, extra);
}

JobRun ParityJobs::collect(const std::string& name, const std::string& output, int64_t final_step) const {
  JobRun result;
  result.losses = metrics_column(dir_ / name / "metrics.jsonl", "loss");
  result.grad_norms = metrics_column(dir_ / name / "metrics.jsonl", "grad_norm");
  result.weights =
      read_all_tensors(dir_ / name / "checkpoint" / fmt::format("step-{:06d}", final_step) / "model.safetensors");
  // The trainer's start line: "..., N bytes of parameters and optimizer state on rank 0".
  const size_t end = output.find(" bytes of parameters and optimizer state");
  if (end != std::string::npos) {
    const size_t begin = output.find_last_not_of("0123456789", end - 1) + 1;
    if (begin < end) result.state_bytes = std::stoll(output.substr(begin, end - begin));
  }
  return result;
}

JobRun ParityJobs::single(const std::string& name, const std::string& extra) const {
  fs::remove_all(dir_ / name);
  return collect(name, run(TITAN_CLI_PATH + arguments(name, 4, extra)));
}

namespace {

std::string launcher(int ranks) {
  if (ranks == 1) return TITAN_CLI_PATH;
  return fmt::format("{} --allow-run-as-root --oversubscribe -np {} -x OMP_NUM_THREADS=1 {}", TITAN_MPIEXEC, ranks,
                     TITAN_CLI_PATH);
}

}  // namespace

JobRun ParityJobs::distributed(const std::string& name, int ranks, int dp, const std::string& parallelism) const {
  fs::remove_all(dir_ / name);
  return collect(name, run(launcher(ranks) + arguments(name, 4 / dp, parallelism)));
}

JobRun ParityJobs::resume(const std::string& from, const std::string& name, int ranks, int dp,
                          const std::string& extra) const {
  fs::remove_all(dir_ / name);
  fs::create_directories(dir_ / name / "checkpoint");
  const std::string step = fmt::format("step-{:06d}", kParityResumeStep);
  fs::copy(dir_ / from / "checkpoint" / step, dir_ / name / "checkpoint" / step, fs::copy_options::recursive);
  return collect(name, run(launcher(ranks) + arguments(name, 4 / dp, extra)));
}

std::vector<double> ParityJobs::validation_losses(const std::string& name) const {
  std::vector<double> losses;
  std::ifstream file(dir_ / name / "metrics.jsonl");
  for (std::string line; std::getline(file, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("validation_loss")) losses.push_back(record["validation_loss"].get<double>());
  }
  return losses;
}

std::string ParityJobs::failure(const std::string& name, int ranks, int64_t local_batch,
                                const std::string& extra) const {
  const std::string log = (dir_ / (name + ".log")).string();
  const int status =
      std::system(fmt::format("{} --allow-run-as-root --oversubscribe -np {} {}{} > {} 2>&1", TITAN_MPIEXEC, ranks,
                              TITAN_CLI_PATH, arguments(name, local_batch, extra), log)
                      .c_str());
  EXPECT_NE(status, 0) << name;
  return file_text(log);
}

std::string parity_checkpoint_flags() {
  return fmt::format("--checkpoint.enable true --checkpoint.interval {} ", kParityResumeStep);
}

void expect_resumes(const JobRun& uninterrupted, const JobRun& resumed, const std::string& what) {
  SCOPED_TRACE(what);
  const size_t from = static_cast<size_t>(kParityResumeStep);
  ASSERT_EQ(uninterrupted.losses.size(), static_cast<size_t>(kParitySteps));
  ASSERT_EQ(resumed.losses.size(), uninterrupted.losses.size() - from);
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    const double expected = uninterrupted.losses[i + from];
    EXPECT_NEAR(resumed.losses[i], expected, 1e-5 * expected) << "step " << i + from + 1;
  }
}

// Losses: the same global batch, the gradient averaged over ranks (or over
// micro-batches) instead of over one batch; only the order of f32 sums
// differs, so per-step losses agree to ~1e-7 relative, well inside 1e-5 after
// the AdamW steps. Weights: each AdamW update is lr * m / sqrt(v), bounded by
// lr = 2e-3 per step, and rounding differences of ~1e-7 in m and v move whole
// tensors by far less than 1e-5 of their norm. Gradient norms: AdamW is nearly
// blind to a gradient's scale, so a wrongly scaled gradient shows there first.
void expect_matches(const JobRun& expected, const JobRun& actual, const std::string& what, bool grad_norms) {
  expect_matches(expected, actual, what, grad_norms, 1e-5);
}

void expect_matches(const JobRun& expected, const JobRun& actual, const std::string& what, bool grad_norms,
                    double drift) {
  SCOPED_TRACE(what);
  ASSERT_EQ(actual.losses.size(), expected.losses.size());
  for (size_t i = 0; i < expected.losses.size(); ++i) {
    EXPECT_NEAR(actual.losses[i], expected.losses[i], 1e-5 * expected.losses[i]) << "step " << i + 1;
  }
  ASSERT_EQ(actual.weights.size(), expected.weights.size());
  for (const auto& [name, tensor] : expected.weights) {
    ASSERT_TRUE(actual.weights.count(name)) << name;
    EXPECT_LT(relative_l2_error(actual.weights.at(name), tensor), drift) << name;
  }
  if (!grad_norms) return;
  ASSERT_EQ(actual.grad_norms.size(), expected.grad_norms.size());
  for (size_t i = 0; i < expected.grad_norms.size(); ++i) {
    // Step 1's gradient comes from identical weights: no drift yet.
    const double tolerance = i == 0 ? 1e-5 : drift;
    EXPECT_NEAR(actual.grad_norms[i], expected.grad_norms[i], tolerance * expected.grad_norms[i]) << "step " << i + 1;
  }
}

}  // namespace titan::testing
