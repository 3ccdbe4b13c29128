#include "titan/nn/embedding.h"

#include "titan/nn/functional.h"
#include "titan/ops/random.h"

namespace titan::nn {

std::shared_ptr<Embedding> EmbeddingConfig::build(Device device) const {
  return std::make_shared<Embedding>(*this, device);
}

Embedding::Embedding(const EmbeddingConfig& config, Device device)
    : config(config),
      weight(register_parameter("weight", Tensor::empty({config.num_embeddings, config.dim}, DType::f32, device))) {
  TITAN_CHECK(config.num_embeddings > 0 && config.dim > 0, "Embedding: sizes must be positive, got {} x {}",
              config.num_embeddings, config.dim);
  set_init(1.0);
}

Tensor Embedding::forward(const Tensor& ids) const {
  const ForwardScope scope(*this);
  const Tensor table = weight->materialize(), inputs = pre_forward(ids);
  return post_forward(lookup_ ? lookup_(table, inputs) : F::embedding(table, inputs));
}

void Embedding::set_init(double std) { weight->init = InitRule::normal(0.0, std); }

}  // namespace titan::nn
