#include "titan/models/parallelize_decoder.h"

#include "titan/autograd/checkpoint.h"
#include "titan/autograd/offload.h"
#include "titan/distributed/tensor_parallel.h"
#include "titan/nn/functional.h"

namespace titan::models {

void apply_mixed_precision(Decoder& model, DType dtype) {
  if (dtype == DType::f32) return;
  for (auto& [name, parameter] : model.named_parameters()) {
    parameter->parametrizations.push_back([dtype](const Tensor& stored) { return F::cast(stored, dtype); });
  }
}

void apply_activation_checkpointing(Decoder& model, const std::string& mode, int64_t every) {
  TITAN_CHECK(mode == "none" || mode == "full" || mode == "selective" || mode == "offload",
              "activation checkpointing mode '{}' is not one of none, full, selective, offload", mode);
  if (mode == "none") return;
  if (mode == "offload") {
    auto offloader = std::make_shared<autograd::ActivationOffloader>(static_cast<int64_t>(model.layers->size()));
    for (size_t i = 0; i < model.layers->size(); ++i) {
      (*model.layers)[i]->set_runner([offloader, i](const nn::BlockBody& body, const Tensor& x) {
        return offloader->run(static_cast<int64_t>(i), body, x);
      });
    }
    return;
  }
  TITAN_CHECK(every > 0, "activation checkpointing: selective_every must be > 0, got {}", every);
  const nn::BlockRunner checkpointed = [](const nn::BlockBody& body, const Tensor& x) {
    return autograd::checkpoint([body](const std::vector<Tensor>& in) { return std::vector<Tensor>{body(in[0])}; },
                                {x})[0];
  };
  for (size_t i = 0; i < model.layers->size(); ++i) {
    if (mode == "full" || i % static_cast<size_t>(every) == 0) (*model.layers)[i]->set_runner(checkpointed);
  }
}

void apply_tensor_parallel(Decoder& model, const distributed::DeviceMesh& mesh) {
  const std::shared_ptr<distributed::ProcessGroup> tp = mesh.group("tp");
  if (tp->size() == 1) return;
  const auto& a = model.config.block.attention;
  TITAN_CHECK(a.n_heads % tp->size() == 0 && a.kv_heads() % tp->size() == 0,
              "tensor parallelism: {} query / {} key-value heads do not split over {} ranks", a.n_heads, a.kv_heads(),
              tp->size());
  const auto gather = [tp](const Tensor& x) { return distributed::gather_sequence(x, tp); };
  const auto scatter = [tp](const Tensor& x) { return distributed::reduce_scatter_sequence(x, tp); };
  for (size_t i = 0; i < model.layers->size(); ++i) {
    nn::TransformerBlock& block = *(*model.layers)[i];
    const std::string prefix = fmt::format("layers.{}.", i);
    for (auto* linear : {block.attention->wq.get(), block.attention->wk.get(), block.attention->wv.get(),
                         block.feed_forward->w1.get(), block.feed_forward->w3.get()}) {
      distributed::shard_parameter(prefix + "column-parallel weight", *linear->weight, 0, *tp);
    }
    for (auto* linear : {block.attention->wo.get(), block.feed_forward->w2.get()}) {
      distributed::shard_parameter(prefix + "row-parallel weight", *linear->weight, 1, *tp);
    }
    for (nn::Module* module :
         {static_cast<nn::Module*>(block.attention.get()), static_cast<nn::Module*>(block.feed_forward.get())}) {
      module->input_hooks.push_back(gather);
      module->output_hooks.push_back(scatter);
    }
  }
  // Each rank embeds its part of the sequence; the residual stream stays split until the loss.
  model.tok_embeddings->input_hooks.push_back(
      [tp](const Tensor& ids) { return distributed::slice_sequence(ids, *tp); });
  if (model.output) distributed::shard_parameter("output.weight", *model.output->weight, 0, *tp);
  const LossConfig loss = model.config.loss;
  const int64_t vocab = model.config.vocab_size;
  TITAN_CHECK(vocab % tp->size() == 0, "tensor parallelism: vocabulary {} does not split over {} ranks", vocab,
              tp->size());
  model.loss_function = [tp, loss, vocab](const Tensor& hidden, const Tensor& weight, const Tensor& labels) {
    // A tied table is whole on every rank: take this rank's vocabulary rows of it.
    const int64_t rows = vocab / tp->size();
    const Tensor local = weight.size(0) == vocab ? F::narrow(weight, 0, tp->rank() * rows, rows) : weight;
    const Tensor full = distributed::gather_sequence(hidden, tp);
    ops::FusedCrossEntropyOptions options;
    options.loss = {.ignore_index = -100, .softcap = loss.softcap, .z_loss = loss.z_loss};
    options.token_chunk = loss.token_chunk;
    options.vocab_chunk = loss.vocab_chunk;
    return distributed::vocab_parallel_cross_entropy(F::reshape(full, {-1, full.size(-1)}), local, labels.reshape({-1}),
                                                     vocab, options, tp);
  };
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
