#include "titan/nn/lora.h"

#include <cmath>

#include "titan/autograd/grad_mode.h"
#include "titan/core/copy.h"
#include "titan/nn/functional.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/gemm.h"
#include "titan/ops/random.h"

namespace titan::nn {

LoraAdapter::LoraAdapter(const LoraConfig& config, Device device, Generator* dropout_generator)
    : config(config), dropout_generator_(dropout_generator) {
  TITAN_CHECK(config.rank > 0, "LoRA: rank must be > 0, got {}", config.rank);
  TITAN_CHECK(config.dropout >= 0.0 && config.dropout < 1.0, "LoRA: dropout must be in [0, 1), got {}", config.dropout);
  TITAN_CHECK(config.dropout == 0.0 || dropout_generator != nullptr, "LoRA: dropout needs a generator");
  lora_A = LinearConfig{config.in_features, config.rank}.build(device);
  lora_B = LinearConfig{config.rank, config.out_features}.build(device);
  // PEFT's default: A ~ kaiming_uniform(a = sqrt(5)), i.e. U(-1/sqrt(in),
  // 1/sqrt(in)); B = 0, so the adapted layer starts as the base layer.
  const double bound = 1.0 / std::sqrt(static_cast<double>(config.in_features));
  lora_A->weight->init = InitRule::uniform(-bound, bound);
  lora_B->weight->init = InitRule::constant(0.0);
}

Tensor LoraAdapter::forward(const Tensor& x) const {
  Tensor input = x;
  // Dropout in training forwards only (with grad): decoding and validation see the whole input.
  if (config.dropout > 0.0 && autograd::grad_enabled()) {
    // The mask is drawn on the host from the job's counter-based generator
    // (the same on every device and thread count) and scaled by 1 / keep, as torch's dropout.
    Tensor mask = Tensor::empty(x.shape(), DType::f32, Device::cpu());
    ops::uniform_(mask, 0.0, 1.0, *dropout_generator_);
    const float keep = static_cast<float>(1.0 - config.dropout), scale = 1.0f / keep;
    float* values = mask.data<float>();
    for (int64_t i = 0; i < mask.numel(); ++i) values[i] = values[i] < keep ? scale : 0.0f;
    input = F::mul(x, mask.to(x.device()).to(x.dtype()));
  }
  return F::scale(lora_B->forward(lora_A->forward(input)), static_cast<float>(config.scale()));
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> LoraAdapter::modules() const {
  return {{"lora_A", lora_A}, {"lora_B", lora_B}};
}

std::vector<std::pair<Parameter*, int64_t>> LoraAdapter::split_with_base(int64_t base_dim) const {
  // Column-parallel base (its output rows split): B's rows split alike, A
  // stays whole. Row-parallel base (its input columns split): A's columns
  // split, so each rank's B(A x) is a partial sum the base's reduction adds up.
  if (base_dim == 0) return {{lora_B->weight, 0}};
  return {{lora_A->weight, 1}};
}

Tensor lora_merged_weight(const Tensor& weight, const Tensor& a, const Tensor& b, double scale) {
  const Tensor delta =
      ops::scale(ops::matmul(b.detach().to(DType::f32), a.detach().to(DType::f32)), static_cast<float>(scale));
  return ops::add(weight.detach().to(DType::f32), delta.to(weight.device())).to(weight.dtype());
}

}  // namespace titan::nn
