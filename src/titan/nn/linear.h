// Linear layer: y = x @ W^T (+ b when config.bias: Qwen 2's q/k/v projections;
// Llama has none), plus, when one is installed from outside (LoRA
// fine-tuning), an adapter's output. A float8 recipe installed from outside
// (models/float8_plan.h) runs its GEMMs on float8-cast operands.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/generator.h"
#include "titan/nn/module.h"

namespace titan::nn {

class Linear;
struct Float8LinearRecipe;

// Something added to a Linear's output, computed from the same input: a
// low-rank update (nn/lora.h). Installed by a plan outside the model code, as
// Attention's core is; its parameters live in modules registered under the
// Linear, so their names follow it ("layers.0.attention.wq.lora_A.weight").
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  // x [..., in] -> [..., out], added to the base output.
  virtual Tensor forward(const Tensor& x) const = 0;
  // The modules holding its parameters, by the name each takes under the Linear.
  virtual std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules() const = 0;
  // Tensor parallelism splits the base weight along `base_dim` (0: output rows,
  // column-parallel; 1: input columns, row-parallel): which adapter parameters
  // split with it, and along which of their dims, so that the adapter's output
  // is laid out (or summed) as the base's is.
  virtual std::vector<std::pair<Parameter*, int64_t>> split_with_base(int64_t base_dim) const = 0;
};

struct LinearConfig {
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = false;
  std::shared_ptr<Linear> build(Device device = Device::cpu()) const;
};

class Linear : public Module {
 public:
  Linear(const LinearConfig& config, Device device);
  Tensor forward(const Tensor& x) const;
  // Init rules: the weight truncated normal N(0, std) cut at [low, high]
  // (absolute, as torch.nn.init.trunc_normal_), N(0, 0.02) in [-2, 2] unless
  // set; the bias zeros.
  void set_init(double std, double low = -2.0, double high = 2.0);
  // Installs `adapter` (one per Linear) and registers its modules as children.
  void set_adapter(std::shared_ptr<LinearAdapter> adapter);
  // Drops the adapter and its modules (the export of a merged model).
  void remove_adapter();
  const std::shared_ptr<LinearAdapter>& adapter() const { return adapter_; }
  // Runs forward and backward as F::float8_linear with `recipe` (null: F::linear again).
  void set_float8(std::shared_ptr<const Float8LinearRecipe> recipe) { float8_ = std::move(recipe); }
  const std::shared_ptr<const Float8LinearRecipe>& float8() const { return float8_; }

  const LinearConfig config;
  Parameter* const weight;  // [out_features, in_features]
  Parameter* const bias;    // [out_features]; null without config.bias
  // Set by tensor parallelism's row-parallel split: forward leaves the bias
  // out, and the plan adds it once after the ranks' partial outputs are
  // summed (models/parallelize_decoder.cpp), not once per rank.
  bool bias_added_outside = false;

 private:
  std::shared_ptr<LinearAdapter> adapter_;
  std::shared_ptr<const Float8LinearRecipe> float8_;
};

}  // namespace titan::nn
