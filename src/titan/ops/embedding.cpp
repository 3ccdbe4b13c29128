#include "titan/ops/embedding.h"

#include "titan/core/trace_context.h"

#include "titan/core/copy.h"
#include "titan/ops/checks.h"

namespace titan::ops {

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  const trace::OpScope op_scope("embedding");
  check_defined("embedding", weight, "weight");
  check_defined("embedding", ids, "ids");
  check_rank("embedding", weight, 2, "weight");
  check_dtype("embedding", ids, {DType::i32, DType::i64}, "ids");
  check_same_device("embedding", weight, ids);
  Shape shape = ids.shape();
  shape.push_back(weight.size(1));
  Tensor out = Tensor::empty(shape, weight.dtype(), weight.device());
  if (!out.device().is_meta()) embedding_kernels(weight.device(), out, weight.contiguous(), ids.contiguous());
  return out;
}

Tensor embedding_backward(const Tensor& grad_out, const Tensor& ids, int64_t num_embeddings, DType grad_dtype) {
  const trace::OpScope op_scope("embedding_backward");
  check_defined("embedding_backward", grad_out, "grad_out");
  check_dtype("embedding_backward", ids, {DType::i32, DType::i64}, "ids");
  const int64_t dim = grad_out.size(-1);
  TITAN_CHECK(grad_out.numel() == ids.numel() * dim, "embedding_backward: grad {} does not match ids {}",
              shape_str(grad_out.shape()), shape_str(ids.shape()));
  // The kernel accumulates into f32 whatever the requested dtype; cast once at the end.
  Tensor grad_weight = Tensor::zeros({num_embeddings, dim}, DType::f32, grad_out.device());
  if (!grad_weight.device().is_meta()) {
    embedding_backward_kernels(grad_out.device(), grad_weight, grad_out.contiguous(), ids.contiguous());
  }
  return cast(grad_weight, grad_dtype);
}

}  // namespace titan::ops
