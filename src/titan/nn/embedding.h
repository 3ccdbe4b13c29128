// Token embedding table: ids -> rows of a [num_embeddings, dim] weight.
#pragma once

#include <memory>

#include "titan/core/generator.h"
#include "titan/nn/module.h"

namespace titan::nn {

class Embedding;

struct EmbeddingConfig {
  int64_t num_embeddings = 0;
  int64_t dim = 0;
  std::shared_ptr<Embedding> build(Device device = Device::cpu()) const;
};

class Embedding : public Module {
 public:
  Embedding(const EmbeddingConfig& config, Device device);
  Tensor forward(const Tensor& ids) const;
  void init_weights(Generator& generator, double std = 1.0);

  const EmbeddingConfig config;
  Parameter* const weight;  // [num_embeddings, dim]
};

}  // namespace titan::nn
