// The AdamW optimizer over a model's named parameters: parameter groups by
// name pattern (no weight decay for norms and embeddings by default), moments
// in f32 or bf16, one fused multi-tensor update per group.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/ops/adamw.h"

namespace titan::optim {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  // Parameters whose name contains any of these get weight_decay 0.
  std::vector<std::string> no_weight_decay;
  DType state_dtype = DType::f32;
};

class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, Tensor>> named_parameters, AdamWOptions options);

  // One update at learning rate `lr` using each parameter's .grad() (a
  // parameter without a gradient is skipped, its moments untouched):
  // prepare(lr) then apply().
  void step(double lr);
  // The host half of a step: counts it and writes its learning rate and bias
  // corrections to the device (what a replayed CUDA graph reads).
  void prepare(double lr);
  // The device half: the update itself, with the values prepare() wrote.
  // Issues no host work besides kernel launches, so a graph can capture it.
  void apply();
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  bool decays(const std::string& name) const;

  // Moments by parameter name ("exp_avg.<name>", "exp_avg_sq.<name>") and the
  // step count: the optimizer's part of a checkpoint.
  std::map<std::string, Tensor> state_tensors() const;
  void load_state(const std::map<std::string, Tensor>& tensors, int64_t steps);

 private:
  struct Slot {
    std::string name;
    Tensor param, exp_avg, exp_avg_sq;
    bool decay;
  };
  ops::AdamWHyper hyper(bool decay) const;

  std::vector<Slot> slots_;
  AdamWOptions options_;
  double lr_ = 0.0;
  Tensor step_scalars_;  // [2, 3] f32 on the parameters' device: decaying and non-decaying groups
  int64_t steps_ = 0;
};

}  // namespace titan::optim
