#include "titan/parallel/mixed_precision.h"

#include "titan/nn/functional.h"

namespace titan::parallel {

void apply_mixed_precision(nn::Module& model, DType dtype) {
  if (dtype == DType::f32) return;
  for (auto& [name, parameter] : model.named_parameters()) {
    parameter->parametrizations.push_back([dtype](const Tensor& stored) { return F::cast(stored, dtype); });
  }
}

}  // namespace titan::parallel
