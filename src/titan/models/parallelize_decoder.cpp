#include "titan/models/parallelize_decoder.h"

#include "titan/autograd/checkpoint.h"
#include "titan/nn/functional.h"

namespace titan::models {

void apply_mixed_precision(Decoder& model, DType dtype) {
  if (dtype == DType::f32) return;
  for (auto& [name, parameter] : model.named_parameters()) {
    parameter->parametrizations.push_back([dtype](const Tensor& stored) { return F::cast(stored, dtype); });
  }
}

void apply_activation_checkpointing(Decoder& model, const std::string& mode, int64_t every) {
  TITAN_CHECK(mode == "none" || mode == "full" || mode == "selective",
              "activation checkpointing mode '{}' is not one of none, full, selective", mode);
  if (mode == "none") return;
  TITAN_CHECK(every > 0, "activation checkpointing: selective_every must be > 0, got {}", every);
  const nn::BlockRunner checkpointed = [](const nn::BlockBody& body, const Tensor& x) {
    return autograd::checkpoint([body](const std::vector<Tensor>& in) { return std::vector<Tensor>{body(in[0])}; },
                                {x})[0];
  };
  for (size_t i = 0; i < model.layers->size(); ++i) {
    if (mode == "full" || i % static_cast<size_t>(every) == 0) (*model.layers)[i]->set_runner(checkpointed);
  }
}

}  // namespace titan::models
