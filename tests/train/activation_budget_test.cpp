// activation_checkpoint.mode = memory_budget: budget 0 is full
// checkpointing, 1 none, and in between the plan with the largest estimated
// need within full + budget x (none - full); a larger budget never picks a
// plan keeping less. The chosen plan trains exactly as the plain run.
#include <gtest/gtest.h>

#include "titan/models/model_spec.h"
#include "titan/train/activation_budget.h"
#include "titan/train/memory_check.h"
#include "titan/train/random_batches.h"
#include "titan/train/trainer.h"

namespace titan {
namespace activation_budget_test {

train::JobConfig budget_job(double budget) {
  train::JobConfig config;
  config.training.seq_len = 256;
  config.training.local_batch_size = 8;
  config.model.vocab_size = 300;
  config.activation_checkpoint.mode = "memory_budget";
  config.activation_checkpoint.memory_budget = budget;
  return config;
}

double needed(const train::JobConfig& config, const models::DecoderConfig& model) {
  return train::job_memory_budget(config, model, comm::ParallelDims{}.resolved(1), Device::cpu()).needed_bytes;
}

TEST(ActivationBudget, EndsAreFullAndNoneAndLargerBudgetsKeepMore) {
  const models::DecoderConfig model = models::model_config("llama3", "debugmodel", 300);
  const comm::ParallelDims dims = comm::ParallelDims{}.resolved(1);
  train::JobConfig zero = budget_job(0.0), one = budget_job(1.0);
  EXPECT_NE(train::resolve_activation_memory_budget(zero, model, dims, Device::cpu()), "");
  train::resolve_activation_memory_budget(one, model, dims, Device::cpu());
  EXPECT_EQ(zero.activation_checkpoint.mode, "full");
  EXPECT_EQ(one.activation_checkpoint.mode, "none");
  const double full = needed(zero, model), none = needed(one, model);
  ASSERT_LT(full, none);
  double previous = 0.0;
  std::set<std::string> plans;
  for (int tenth = 0; tenth <= 10; ++tenth) {
    train::JobConfig config = budget_job(tenth / 10.0);
    const std::string line = train::resolve_activation_memory_budget(config, model, dims, Device::cpu());
    EXPECT_NE(line.find("memory_budget"), std::string::npos) << line;
    const double need = needed(config, model);
    EXPECT_LE(need, full + tenth / 10.0 * (none - full) + 1.0) << line;
    EXPECT_GE(need, previous) << line;
    previous = need;
    plans.insert(config.activation_checkpoint.mode + (config.activation_checkpoint.selective_ops ? " ops" : "") +
                 std::to_string(config.activation_checkpoint.selective_every));
  }
  EXPECT_GE(plans.size(), 3u);  // the budget steps through plans between the ends
  // Any other mode is left alone.
  train::JobConfig plain = budget_job(0.5);
  plain.activation_checkpoint.mode = "full";
  EXPECT_EQ(train::resolve_activation_memory_budget(plain, model, dims, Device::cpu()), "");
  EXPECT_EQ(plain.activation_checkpoint.mode, "full");
}

TEST(ActivationBudget, TheChosenPlanTrainsAsThePlainRun) {
  std::vector<std::vector<double>> runs;
  for (const char* mode : {"none", "memory_budget"}) {
    train::JobConfig config = budget_job(0.8);
    config.job.dump_folder = ::testing::TempDir() + "/activation_budget_" + mode;
    config.activation_checkpoint.mode = mode;
    config.training.seq_len = 64;
    config.training.local_batch_size = 4;
    config.training.steps = 2;
    config.metrics.progress = false;
    config.metrics.peak_tflops = 1.0;  // no GEMM-peak measurement
    train::Trainer trainer(config, train::random_token_batches(4, 64, 300, 3));
    std::vector<double> losses;
    for (const auto& m : trainer.train()) losses.push_back(m.loss);
    runs.push_back(losses);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

}  // namespace activation_budget_test
}  // namespace titan
