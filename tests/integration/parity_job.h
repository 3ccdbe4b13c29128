// The parity jobs the parallelism tests share: one small training job (6
// steps of llama3 debugmodel, global batch 4 x 128 tokens, f32) run in one
// process and under mpirun with some mesh, and what each wrote (losses, grad
// norms, final weights, state bytes) compared.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::testing {

// Every parity job's steps, and the step whose checkpoint the resuming tests
// start from (checkpoint.interval): a job resumed there runs steps 4-6.
// Six steps are enough for AdamW's moments to carry a wrong gradient into
// the losses and weights; ten took 40% longer for no other check.
inline constexpr int64_t kParitySteps = 6;
inline constexpr int64_t kParityResumeStep = 3;
// "--checkpoint.enable true --checkpoint.interval <kParityResumeStep> ".
std::string parity_checkpoint_flags();

struct JobRun {
  std::vector<double> losses, grad_norms;
  std::map<std::string, Tensor> weights;  // the final export (empty without one)
  int64_t state_bytes = 0;                // parameters + optimizer state on rank 0
};

class ParityJobs {
 public:
  // Jobs dump under TempDir()/`folder`; the corpus is prepared there once.
  explicit ParityJobs(const std::string& folder);

  const std::filesystem::path& dir() const { return dir_; }
  // Runs a command that must succeed; returns its output.
  std::string run(const std::string& command) const;
  // `train` and its flags for job `name` (dump folder dir()/name), `extra` last.
  std::string arguments(const std::string& name, int64_t local_batch, const std::string& extra = "") const;
  // What job `name` wrote, and the state bytes from its output.
  JobRun collect(const std::string& name, const std::string& output, int64_t final_step = kParitySteps) const;
  // The job in one process, local batch 4.
  JobRun single(const std::string& name, const std::string& extra = "") const;
  // Under mpirun: each of the `dp` data-parallel ranks takes 4 / dp sequences, so the global batch is the single one's.
  JobRun distributed(const std::string& name, int ranks, int dp, const std::string& parallelism) const;
  // Job `name` started from job `from`'s kParityResumeStep checkpoint (copied
  // into its dump folder), in one process (ranks 1) or under mpirun.
  JobRun resume(const std::string& from, const std::string& name, int ranks, int dp, const std::string& extra) const;
  // The validation losses job `name` logged (every validation.freq steps).
  std::vector<double> validation_losses(const std::string& name) const;
  // The output of a job that must fail.
  std::string failure(const std::string& name, int ranks, int64_t local_batch, const std::string& extra) const;

 private:
  std::filesystem::path dir_;
};

// Losses at every step within 1e-5 relative, final weights within 1e-5
// relative L2 (and with `grad_norms`, the gradient norm at every step).
void expect_matches(const JobRun& expected, const JobRun& actual, const std::string& what, bool grad_norms = false);
// A job resumed at kParityResumeStep: its losses are the uninterrupted run's from there on.
void expect_resumes(const JobRun& uninterrupted, const JobRun& resumed, const std::string& what);
// The same with `drift` in place of 1e-5 for the final weights and the
// gradient norms after step 1 (losses stay within 1e-5 at every step): for
// models whose gradients AdamW turns f32 rounding differences into larger
// weight and gradient-norm differences (the Gemmas: up to 2e-4).
void expect_matches(const JobRun& expected, const JobRun& actual, const std::string& what, bool grad_norms,
                    double drift);

}  // namespace titan::testing
