// Embedding lookup and its scatter-add backward.
#pragma once

#include "titan/core/tensor.h"
#include "titan/ops/dispatch.h"

namespace titan::ops {

// weight [V, D], ids (any shape, i32 or i64) -> [ids..., D] in weight's dtype.
// An id outside [0, V) is a titan::Error naming it.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// Sums grad_out rows into the rows of a [V, D] gradient (f32 accumulation,
// deterministic: each row's contributions are added in token order).
Tensor embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t num_embeddings, DType grad_dtype);

using EmbeddingKernel = void(const Tensor& out, const Tensor& weight, const Tensor& ids);
using EmbeddingBackwardKernel = void(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids);
inline Op<EmbeddingKernel> embedding_kernels{"embedding"};
inline Op<EmbeddingBackwardKernel> embedding_backward_kernels{"embedding_backward"};

}  // namespace titan::ops
