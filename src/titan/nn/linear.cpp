#include "titan/nn/linear.h"

#include "titan/core/copy.h"
#include "titan/nn/float8_recipe.h"
#include "titan/nn/functional.h"
#include "titan/ops/random.h"

namespace titan::nn {

std::shared_ptr<Linear> LinearConfig::build(Device device) const { return std::make_shared<Linear>(*this, device); }

Linear::Linear(const LinearConfig& config, Device device)
    : config(config),
      weight(
          register_parameter("weight", Tensor::empty({config.out_features, config.in_features}, DType::f32, device))),
      bias(config.bias ? register_parameter("bias", Tensor::empty({config.out_features}, DType::f32, device))
                       : nullptr) {
  TITAN_CHECK(config.in_features > 0 && config.out_features > 0, "Linear: sizes must be positive, got {} -> {}",
              config.in_features, config.out_features);
  set_init(0.02);
}

Tensor Linear::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  const Tensor b = bias && !bias_added_outside ? bias->materialize() : Tensor();
  Tensor y;
  if (!float8_) {
    y = F::linear(x, weight->materialize(), b);
  } else if (weight->float8_parametrization) {  // cast already, from the master (FSDP's float8 all-gather)
    const ops::Float8Operand w = weight->float8_parametrization();
    y = F::float8_linear(x, w.values, b, *float8_, w.scale);
  } else {
    y = F::float8_linear(x, weight->materialize(), b, *float8_);
  }
  return adapter_ ? F::add(y, adapter_->forward(x)) : y;
}

void Linear::set_adapter(std::shared_ptr<LinearAdapter> adapter) {
  TITAN_CHECK(adapter != nullptr && adapter_ == nullptr, "Linear: {} already has an adapter",
              trace_name().empty() ? std::string("this layer") : trace_name());
  for (const auto& [name, module] : adapter->modules()) register_module(name, module);
  adapter_ = std::move(adapter);
}

void Linear::remove_adapter() {
  if (!adapter_) return;
  for (const auto& [name, module] : adapter_->modules()) remove_child(name);
  adapter_.reset();
}

void Linear::set_init(double std, double low, double high) {
  weight->init = InitRule::truncated_normal(0.0, std, low, high);
  if (bias) bias->init = InitRule::constant(0.0);
}

}  // namespace titan::nn
