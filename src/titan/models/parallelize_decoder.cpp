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

std::shared_ptr<distributed::Fsdp> apply_fsdp(Decoder& model, const distributed::DeviceMesh& mesh, DType param_dtype,
                                              distributed::ReshardPolicy reshard_after_forward) {
  auto fsdp = std::make_shared<distributed::Fsdp>(mesh.group("dp_shard"), mesh.group("dp_replicate"),
                                                  distributed::FsdpOptions{param_dtype, reshard_after_forward});
  std::vector<nn::Parameter*> root;
  for (auto& [name, parameter] : model.named_parameters()) {
    if (!name.starts_with("layers.")) root.push_back(parameter);
  }
  fsdp->add_unit("root", root);
  const size_t layers = model.layers->size();
  for (size_t i = 0; i < layers; ++i) {
    std::vector<nn::Parameter*> block;
    for (auto& [name, parameter] : (*model.layers)[i]->named_parameters()) block.push_back(parameter);
    const size_t unit = fsdp->add_unit(fmt::format("layers.{}", i), block);
    // The last block's backward comes right after its forward: keep it gathered unless told to always reshard.
    const bool reshard = reshard_after_forward == distributed::ReshardPolicy::always ||
                         (reshard_after_forward == distributed::ReshardPolicy::default_policy && i + 1 < layers);
    fsdp->wrap_block(*(*model.layers)[i], unit, reshard);
  }
  return fsdp;
}

}  // namespace titan::models
