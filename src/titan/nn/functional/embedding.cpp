// The autograd function of the embedding lookup (ops/embedding.h); its
// backward is the scatter-add into the weight's rows.
#include "titan/ops/embedding.h"
#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"

namespace titan::F {

using autograd::record;

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  Tensor y = ops::embedding(weight, ids);
  const Tensor saved_ids = ids.detach();
  const int64_t vocab = weight.size(0);
  const DType dtype = weight.dtype();
  record("EmbeddingBackward", {&weight}, {&y},
         [=](const auto& g) { return std::vector<Tensor>{ops::embedding_backward(g[0], saved_ids, vocab, dtype)}; });
  return y;
}

}  // namespace titan::F
