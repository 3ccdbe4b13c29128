// FSDP 2 x TP 2 on the Hugging Face families titan reads from config.json
// (Mistral, Qwen 2, Gemma 2, Gemma 3, OLMo 2, Phi-3): `titan train` of a
// small random HF folder (tests/reference/make_hf_family_folder.py: 4 heads,
// 2 kv heads, windows of 4, Gemma 2's soft-caps, Gemma 3's local and global
// layers, OLMo 2's whole-projection q/k norms, Qwen 2's biases, Phi-3's fused
// tensors split on reading) under mpirun -np 4 against one process: the same
// loss and gradient norm at every step and the same final weights. Each run
// starts from the folder's weights (checkpoint.initial_load_path).
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_job.h"
#include "parity_job.h"
#include "support/families.h"
#include "support/reference.h"

namespace titan {
namespace hf_family_parallel_test {

namespace fs = std::filesystem;

// Four steps of 4 x 32 tokens (eight windows per sequence): enough for AdamW's
// updates to feed back into the losses compared, short enough for 12 jobs.
constexpr int64_t kSteps = 4;

const testing::ParityJobs& jobs() {
  static const testing::ParityJobs instance("hf_family_parallel");
  return instance;
}

// The family's folder, with the test corpus's 512-token vocabulary (the
// tokenizer's ids must fit the embedding; 512 rows also split over TP 2).
fs::path hf_folder(const std::string& family) {
  const fs::path folder = jobs().dir() / (family + "_hf");
  if (!fs::exists(folder / "config.json")) {
    jobs().run(fmt::format("{} {}/make_hf_family_folder.py {} {} --seed 11 --set vocab_size=512", TITAN_PYTHON,
                           TITAN_REFERENCE_SCRIPTS_DIR, family, folder.string()));
  }
  return folder;
}

testing::JobRun run_job(const std::string& launcher, const std::string& name, int64_t local_batch,
                        const std::string& extra) {
  fs::remove_all(jobs().dir() / name);
  return jobs().collect(name, jobs().run(launcher + jobs().arguments(name, local_batch, extra)), kSteps);
}

class HfFamilyParallel : public ::testing::TestWithParam<std::string> {};

// The same global batch and weights; only the order of f32 sums differs
// (FSDP's reduce-scatter, TP's partial sums of the row-parallel projections
// and of the vocabulary-parallel loss), so losses and gradient norms agree to
// ~1e-7 relative, inside the 1e-5 of the llama3 / qwen3 parity tests
// (parity_job.h) after the few steps run here, and so do the final weights:
// each AdamW update moves a weight by at most ~lr, and ~1e-7 differences in
// the moments move whole tensors by far less than 1e-5 of their norm. Qwen 2's
// k biases are the exception: a key bias shifts all of a query's scores alike
// but for its rotation, so in the slowly rotating RoPE pairs its gradient is
// zero up to cancellation, and AdamW turns those rounding-sized gradients
// into lr-sized steps whose values follow the rounding (1.3e-4 seen).
void expect_same_run(const testing::JobRun& single, const testing::JobRun& mesh) {
  ASSERT_EQ(mesh.losses.size(), single.losses.size());
  ASSERT_EQ(mesh.grad_norms.size(), single.grad_norms.size());
  for (size_t i = 0; i < single.losses.size(); ++i) {
    EXPECT_NEAR(mesh.losses[i], single.losses[i], 1e-5 * single.losses[i]) << "step " << i + 1;
    EXPECT_NEAR(mesh.grad_norms[i], single.grad_norms[i], 1e-5 * single.grad_norms[i]) << "step " << i + 1;
  }
  ASSERT_EQ(mesh.weights.size(), single.weights.size());
  for (const auto& [name, tensor] : single.weights) {
    ASSERT_TRUE(mesh.weights.count(name)) << name;
    const double bound = name.ends_with("attention.wk.bias") ? 1e-3 : 1e-5;
    EXPECT_LT(testing::relative_l2_error(mesh.weights.at(name), tensor), bound) << name;
  }
}

TEST_P(HfFamilyParallel, FsdpTwoByTpTwoMatchesOneProcess) {
  const std::string& family = GetParam();
  const fs::path folder = hf_folder(family);
  const std::string job = fmt::format(
      "--model.hf_config {}/config.json --checkpoint.initial_load_path {} --training.steps {} --training.seq_len 32 "
      "--checkpoint.enable true --checkpoint.interval {}",
      folder.string(), folder.string(), kSteps, kSteps);
  const testing::JobRun single = run_job(TITAN_CLI_PATH, family + "_single", 4, job);
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_FALSE(single.weights.empty());
  // Under the sanitizers Open MPI's own allocations would fail the leak check at exit.
  const testing::JobRun mesh =
      run_job("ASAN_OPTIONS=detect_leaks=0 " + testing::mpirun(4, std::string("-x ASAN_OPTIONS ") + TITAN_CLI_PATH),
              family + "_fsdp2_tp2", 2,
              job + " --parallelism.tensor_parallel_degree 2 --parallelism.data_parallel_shard_degree 2");
  expect_same_run(single, mesh);
  double worst_loss = 0.0, worst_norm = 0.0, worst_weight = 0.0;
  for (size_t i = 0; i < single.losses.size() && i < mesh.losses.size(); ++i) {
    worst_loss = std::max(worst_loss, std::abs(mesh.losses[i] - single.losses[i]) / single.losses[i]);
    worst_norm = std::max(worst_norm, std::abs(mesh.grad_norms[i] - single.grad_norms[i]) / single.grad_norms[i]);
  }
  for (const auto& [name, tensor] : single.weights) {
    if (mesh.weights.count(name) && !name.ends_with("wk.bias"))
      worst_weight = std::max(worst_weight, testing::relative_l2_error(mesh.weights.at(name), tensor));
  }
  fmt::print("[ errors   ] {} FSDP 2 x TP 2: loss rel {:.2e}, grad norm rel {:.2e}, final weights rel L2 {:.2e}\n",
             family, worst_loss, worst_norm, worst_weight);
}

INSTANTIATE_TEST_SUITE_P(Families, HfFamilyParallel, ::testing::ValuesIn(testing::families_from_hf_config()),
                         [](const auto& info) { return info.param; });

}  // namespace hf_family_parallel_test
}  // namespace titan
