// LoRA (Hu et al. 2021, as PEFT implements it): a frozen Linear's output plus
// scale * B(A(dropout(x))), with A [rank, in] and B [out, rank] the only
// trained weights and scale = alpha / rank (PEFT's default, not rsLoRA).
// Installed on a Linear as its adapter (nn/linear.h) by models/lora_plan.h,
// so A and B are the Linear's children "lora_A" and "lora_B".
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/generator.h"
#include "titan/nn/linear.h"

namespace titan::nn {

struct LoraConfig {
  int64_t in_features = 0;
  int64_t out_features = 0;
  int64_t rank = 8;
  double alpha = 16.0;
  double dropout = 0.0;  // probability of zeroing an input element (training forwards only)
  double scale() const { return alpha / static_cast<double>(rank); }
};

class LoraAdapter : public LinearAdapter {
 public:
  // `dropout_generator` draws the dropout masks (unused when dropout is 0); it must outlive the adapter.
  LoraAdapter(const LoraConfig& config, Device device, Generator* dropout_generator);
  Tensor forward(const Tensor& x) const override;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules() const override;
  std::vector<std::pair<Parameter*, int64_t>> split_with_base(int64_t base_dim) const override;

  const LoraConfig config;
  std::shared_ptr<Linear> lora_A, lora_B;

 private:
  Generator* dropout_generator_;
};

// The merged weight W + scale * B @ A from whole W [out, in], A [rank, in]
// and B [out, rank]: summed in f32, in W's dtype and on W's device.
Tensor lora_merged_weight(const Tensor& weight, const Tensor& a, const Tensor& b, double scale);

}  // namespace titan::nn
