#include "titan/parallel/mixed_precision.h"

#include "titan/nn/functional.h"

namespace titan::parallel {

void apply_mixed_precision(nn::Module& model, DType dtype) {
  if (dtype == DType::f32) return;
  for (auto& [name, parameter] : model.named_parameters()) {
    parameter->parametrizations.push_back([dtype](const Tensor& stored) { return F::cast(stored, dtype); });
    // Cast to float8 from the f32 master, as FSDP's float8 all-gather casts its shards, not from the bf16 copy.
    if (parameter->float8_all_gather) {
      nn::Parameter* weight = parameter;
      weight->float8_parametrization = [weight, dtype] { return F::float8_cast_weight(weight->data, dtype); };
    }
  }
}

}  // namespace titan::parallel
