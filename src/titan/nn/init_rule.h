// How a parameter's initial values are drawn: declared by the module that
// owns it (and adjusted by the model that holds the module), drawn later by
// nn::initialize. Keeping the rule apart from the draw is what lets a model
// be built on the meta device, cut into shards, and then have each rank draw
// only its own shards.
#pragma once

namespace titan::nn {

struct InitRule {
  enum class Kind { none, constant, uniform, normal, truncated_normal };
  Kind kind = Kind::none;
  double a = 0.0;                // constant: the value; uniform: low; normal and truncated: mean
  double b = 0.0;                // uniform: high; normal and truncated: std
  double low = 0.0, high = 0.0;  // truncated: absolute bounds (as torch.nn.init.trunc_normal_)

  static InitRule constant(double value) { return {Kind::constant, value, 0.0, 0.0, 0.0}; }
  static InitRule uniform(double low, double high) { return {Kind::uniform, low, high, 0.0, 0.0}; }
  static InitRule normal(double mean, double std) { return {Kind::normal, mean, std, 0.0, 0.0}; }
  static InitRule truncated_normal(double mean, double std, double low, double high) {
    return {Kind::truncated_normal, mean, std, low, high};
  }
};

}  // namespace titan::nn
