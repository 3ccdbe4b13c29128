// Token embedding table: ids -> rows of a [num_embeddings, dim] weight.
#pragma once

#include <functional>
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
  // How rows are looked up: F::embedding unless a parallelism replaces it
  // (tensor parallelism's table split by vocabulary rows, which returns its
  // rank's part of the sequence). Hooks still run around it.
  using Lookup = std::function<Tensor(const Tensor& weight, const Tensor& ids)>;
  void set_lookup(Lookup lookup) { lookup_ = std::move(lookup); }

  const EmbeddingConfig config;
  Parameter* const weight;  // [num_embeddings, dim]

 private:
  Lookup lookup_;
};

}  // namespace titan::nn
