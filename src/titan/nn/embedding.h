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
  // Init rule: N(0, std) (N(0, 1) unless set).
  void set_init(double std);

  const EmbeddingConfig config;
  Parameter* const weight;  // [num_embeddings, dim]
};

}  // namespace titan::nn
