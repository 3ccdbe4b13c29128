#include "titan/nn/module.h"

#include <algorithm>
#include <set>

#include "titan/core/copy.h"

namespace titan::nn {

Tensor Parameter::materialize() const {
  Tensor value = data;
  for (const auto& parametrization : parametrizations) value = parametrization(value);
  return value;
}

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters(const std::string& prefix) {
  std::vector<std::pair<std::string, Parameter*>> result;
  for (auto& [name, parameter] : parameters_) result.emplace_back(join(prefix, name), parameter.get());
  for (auto& [name, child] : children_) {
    auto nested = child->named_parameters(join(prefix, name));
    result.insert(result.end(), nested.begin(), nested.end());
  }
  return result;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers(const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor*>> result;
  for (auto& [name, buffer] : buffers_) result.emplace_back(join(prefix, name), &buffer->data);
  for (auto& [name, child] : children_) {
    auto nested = child->named_buffers(join(prefix, name));
    result.insert(result.end(), nested.begin(), nested.end());
  }
  return result;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_persistent_buffers(const std::string& prefix) {
  std::vector<std::pair<std::string, Tensor*>> result;
  for (auto& [name, buffer] : buffers_) {
    if (buffer->persistent) result.emplace_back(join(prefix, name), &buffer->data);
  }
  for (auto& [name, child] : children_) {
    auto nested = child->named_persistent_buffers(join(prefix, name));
    result.insert(result.end(), nested.begin(), nested.end());
  }
  return result;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> result{{prefix, this}};
  for (auto& [name, child] : children_) {
    auto nested = child->named_modules(join(prefix, name));
    result.insert(result.end(), nested.begin(), nested.end());
  }
  return result;
}

void Module::name_modules(const std::string& prefix) {
  trace_name_ = prefix.empty() ? "model" : prefix;
  for (auto& [name, child] : children_) child->name_modules(join(prefix, name));
}

void Module::remove_child(const std::string& name) {
  const auto found =
      std::find_if(children_.begin(), children_.end(), [&](const auto& child) { return child.first == name; });
  TITAN_CHECK(found != children_.end(), "Module: no child '{}' to remove", name);
  children_.erase(found);
}

std::vector<Tensor> Module::parameters() {
  std::vector<Tensor> result;
  for (auto& [name, parameter] : named_parameters()) result.push_back(parameter->data);
  return result;
}

int64_t Module::num_parameters() {
  int64_t total = 0;
  for (auto& [name, parameter] : named_parameters()) total += parameter->data.numel();
  return total;
}

std::vector<std::pair<std::string, Tensor>> Module::named_state() {
  std::vector<std::pair<std::string, Tensor>> state;
  for (auto& [name, parameter] : named_parameters()) state.emplace_back(name, parameter->data);
  for (auto& [name, buffer] : named_persistent_buffers()) state.emplace_back(name, *buffer);
  return state;
}

std::map<std::string, Tensor> Module::state_dict() {
  const auto state = named_state();
  return {state.begin(), state.end()};
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  std::map<std::string, Tensor> own = state_dict();
  std::set<std::string> used;
  for (auto& [name, target] : own) {
    auto found = state.find(name);
    if (found == state.end()) {
      TITAN_CHECK(!strict, "load_state_dict: missing tensor '{}'", name);
      continue;
    }
    TITAN_CHECK(found->second.shape() == target.shape(), "load_state_dict: tensor '{}' has shape {}, model expects {}",
                name, shape_str(found->second.shape()), shape_str(target.shape()));
    titan::copy_(target, found->second);
    used.insert(name);
  }
  if (strict) {
    for (const auto& [name, tensor] : state) {
      TITAN_CHECK(used.count(name) != 0, "load_state_dict: unexpected tensor '{}' (not in the model)", name);
    }
  }
}

void Module::for_each_tensor(const std::function<Tensor(const Tensor&, bool is_parameter)>& convert) {
  for (auto& [name, module] : named_modules()) {
    for (auto& [parameter_name, parameter] : module->parameters_) {
      const bool requires_grad = parameter->data.requires_grad();
      parameter->data = convert(parameter->data, true).detach();
      parameter->data.set_requires_grad(requires_grad);
    }
    for (auto& [buffer_name, buffer] : module->buffers_) buffer->data = convert(buffer->data, false);
  }
}

void Module::to(DType dtype) {
  for_each_tensor([dtype](const Tensor& t, bool) { return is_floating(t.dtype()) ? t.to(dtype) : t; });
}

void Module::to(Device device) {
  for_each_tensor([device](const Tensor& t, bool) { return t.to(device); });
}

void Module::to_empty(Device device) {
  for_each_tensor([device](const Tensor& t, bool) { return Tensor::empty(t.shape(), t.dtype(), device); });
}

void Module::zero_grad() {
  for (auto& [name, parameter] : named_parameters()) parameter->data.set_grad(Tensor());
}

Tensor Module::pre_forward(const Tensor& input) const {
  Tensor x = input;
  for (const auto& hook : input_hooks) x = hook(x);
  return x;
}

Tensor Module::post_forward(const Tensor& output) const {
  Tensor y = output;
  for (const auto& hook : output_hooks) y = hook(y);
  return y;
}

Parameter* Module::register_parameter(const std::string& name, Tensor data) {
  for (const auto& [existing, parameter] : parameters_) {
    TITAN_CHECK(existing != name, "register_parameter: '{}' registered twice", name);
  }
  auto parameter = std::make_unique<Parameter>();
  parameter->data = std::move(data);
  parameter->data.set_requires_grad(true);
  Parameter* raw = parameter.get();
  parameters_.emplace_back(name, std::move(parameter));
  return raw;
}

Tensor* Module::register_buffer(const std::string& name, Tensor data, bool persistent) {
  auto buffer = std::make_unique<Buffer>(Buffer{std::move(data), persistent});
  Tensor* raw = &buffer->data;
  buffers_.emplace_back(name, std::move(buffer));
  return raw;
}

}  // namespace titan::nn
