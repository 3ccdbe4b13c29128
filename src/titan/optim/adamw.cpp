#include "titan/optim/adamw.h"

#include "titan/core/copy.h"
#include "titan/ops/adamw.h"

namespace titan::optim {

AdamW::AdamW(std::vector<std::pair<std::string, Tensor>> named_parameters, AdamWOptions options)
    : options_(std::move(options)) {
  for (auto& [name, param] : named_parameters) {
    Slot slot{name, param, Tensor::zeros(param.shape(), options_.state_dtype, param.device()),
              Tensor::zeros(param.shape(), options_.state_dtype, param.device()), false};
    slot.decay = decays(name);
    slots_.push_back(std::move(slot));
  }
}

bool AdamW::decays(const std::string& name) const {
  for (const std::string& pattern : options_.no_weight_decay) {
    if (name.find(pattern) != std::string::npos) return false;
  }
  return true;
}

ops::AdamWHyper AdamW::hyper(bool decay) const {
  ops::AdamWHyper hyper;
  hyper.lr = static_cast<float>(lr_);
  hyper.beta1 = static_cast<float>(options_.beta1);
  hyper.beta2 = static_cast<float>(options_.beta2);
  hyper.eps = static_cast<float>(options_.eps);
  hyper.weight_decay = decay ? static_cast<float>(options_.weight_decay) : 0.0f;
  hyper.step = steps_;
  return hyper;
}

void AdamW::step(double lr) {
  prepare(lr);
  apply();
}

void AdamW::prepare(double lr) {
  ++steps_;
  lr_ = lr;
  if (slots_.empty()) return;
  std::vector<float> values;
  for (bool decay : {true, false}) {
    const ops::AdamWStepScalars s = ops::adamw_step_scalars(hyper(decay));
    values.insert(values.end(), {s.decay, s.step_size, s.inv_sqrt_bias2});
  }
  const Device device = slots_.front().param.device();
  if (!step_scalars_.defined()) step_scalars_ = Tensor::empty({2, 3}, DType::f32, device);
  titan::copy_(step_scalars_, Tensor::from_floats(values, {2, 3}));
}

void AdamW::apply() {
  TITAN_CHECK(steps_ > 0, "AdamW::apply before prepare");
  for (bool decay : {true, false}) {
    std::vector<Tensor> params, grads, m, v;
    for (const Slot& slot : slots_) {
      if (slot.decay != decay || !slot.param.grad().defined()) continue;
      params.push_back(slot.param);
      grads.push_back(slot.param.grad());
      m.push_back(slot.exp_avg);
      v.push_back(slot.exp_avg_sq);
    }
    if (params.empty()) continue;
    ops::AdamWHyper group = hyper(decay);
    group.step_scalars = step_scalars_.select(0, decay ? 0 : 1);
    ops::adamw_step(params, grads, m, v, group);
  }
}

std::map<std::string, Tensor> AdamW::state_tensors() const {
  std::map<std::string, Tensor> state;
  for (const Slot& slot : slots_) {
    state["exp_avg." + slot.name] = slot.exp_avg;
    state["exp_avg_sq." + slot.name] = slot.exp_avg_sq;
  }
  return state;
}

void AdamW::load_state(const std::map<std::string, Tensor>& tensors, int64_t steps) {
  for (Slot& slot : slots_) {
    for (auto [prefix, target] : {std::pair{"exp_avg.", &slot.exp_avg}, std::pair{"exp_avg_sq.", &slot.exp_avg_sq}}) {
      auto found = tensors.find(prefix + slot.name);
      TITAN_CHECK(found != tensors.end(), "optimizer state: missing '{}{}'", prefix, slot.name);
      TITAN_CHECK(found->second.shape() == target->shape(), "optimizer state '{}{}': shape {} vs parameter {}", prefix,
                  slot.name, shape_str(found->second.shape()), shape_str(target->shape()));
      titan::copy_(*target, found->second);
    }
  }
  steps_ = steps;
}

}  // namespace titan::optim
