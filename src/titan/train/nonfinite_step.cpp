#include "titan/train/nonfinite_step.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace titan::train {

std::string first_nonfinite_gradient(nn::Module& model, comm::ProcessGroup& world) {
  std::string mine;
  for (auto& [name, parameter] : model.named_parameters()) {
    const Tensor grad = parameter->data.grad();
    if (!grad.defined()) continue;
    const std::vector<float> values = grad.to(Device::cpu()).to_floats();
    if (std::any_of(values.begin(), values.end(), [](float v) { return !std::isfinite(v); })) {
      mine = name;
      break;
    }
  }
  if (world.size() == 1) return mine;
  // The lowest rank that found one tells the others its name.
  Tensor claim = Tensor::full({1}, mine.empty() ? 0.0 : static_cast<double>(world.size() - world.rank()), DType::f32);
  world.all_reduce(claim, comm::ReduceOp::max)->wait();
  const int claimed = static_cast<int>(claim.item());
  if (claimed == 0) return "";
  const int owner = world.size() - claimed;
  constexpr int64_t kNameBytes = 512;
  std::vector<int32_t> bytes(kNameBytes, 0);
  for (size_t i = 0; i < mine.size() && i + 1 < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(mine[i]);
  Tensor name = Tensor::from_vector(bytes, {kNameBytes});
  world.broadcast(name, owner)->wait();
  std::string result;
  for (int64_t c : name.to_ints()) {
    if (c == 0) break;
    result += static_cast<char>(c);
  }
  return fmt::format("{} (on rank {})", result, owner);
}

bool handle_nonfinite_step(const NonfiniteStep& step, const JobConfig& config, nn::Module& model,
                           optim::AdamW& optimizer, comm::ProcessGroup& world,
                           const std::function<void()>& save_checkpoint) {
  const std::string culprit = first_nonfinite_gradient(model, world);
  const std::string what = fmt::format(
      "step {}: the loss is {} and the gradient norm {}{}", step.step, step.metrics.loss, step.metrics.grad_norm,
      culprit.empty() ? std::string(" (every gradient is finite: the loss alone is not)")
                      : fmt::format("; the first parameter whose gradient is not finite is {}", culprit));
  if (config.training.skip_nonfinite_steps && !step.update_applied) {
    // AdamW counted the step when it prepared it; its bias corrections must not.
    optimizer.set_steps_taken(optimizer.steps_taken() - 1);
    if (world.rank() == 0) {
      std::printf("titan: warning: %s. Skipping the step (no update; training.skip_nonfinite_steps)\n", what.c_str());
      std::fflush(stdout);
    }
    return true;
  }
  // The weights are still those before this step: worth keeping to look into.
  const bool save = config.checkpoint.enable && !config.checkpoint.load_only && !step.update_applied;
  if (save) save_checkpoint();
  fail("{}. Stopping{}", what,
       step.update_applied ? " (the recorded step already applied its update: no checkpoint saved)"
       : save              ? fmt::format(" after saving checkpoint step-{} (the weights before this step's update, "
                                                      "the data position after its batches); training.skip_nonfinite_steps = "
                                                      "true skips such steps",
                                         step.step)
       : config.checkpoint.load_only
           ? " (checkpoint.load_only: no checkpoint saved); training.skip_nonfinite_steps = true skips such steps "
             "instead"
           : " (checkpoints are off); training.skip_nonfinite_steps = true skips such steps instead");
}

}  // namespace titan::train
