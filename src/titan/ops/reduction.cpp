#include "titan/ops/reduction.h"

#include "titan/core/trace_context.h"

#include "titan/ops/checks.h"

namespace titan::ops {
namespace {

Tensor reduce(ReduceOp op, const char* name, const Tensor& x) {
  const trace::OpScope op_scope("reduce");
  check_defined(name, x, "input");
  TITAN_CHECK(op != ReduceOp::max || x.numel() > 0, "{}: empty tensor (shape {})", name, shape_str(x.shape()));
  Tensor out = Tensor::empty({}, DType::f32, x.device());
  if (!out.device().is_meta()) reduce_kernels(x.device(), op, out, x.contiguous());
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce(ReduceOp::sum, "sum", x); }
Tensor mean(const Tensor& x) { return reduce(ReduceOp::mean, "mean", x); }
Tensor max(const Tensor& x) { return reduce(ReduceOp::max, "max", x); }
Tensor sum_squares(const Tensor& x) { return reduce(ReduceOp::sum_squares, "sum_squares", x); }

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  const trace::OpScope op_scope("sum");
  check_defined("sum_to_shape", x, "input");
  if (x.shape() == shape) return x;
  TITAN_CHECK(static_cast<int64_t>(shape.size()) <= x.dim(), "sum_to_shape: {} has fewer dims than {}",
              shape_str(x.shape()), shape_str(shape));
  const size_t lead = static_cast<size_t>(x.dim()) - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    TITAN_CHECK(shape[d] == 1 || shape[d] == x.shape()[d + lead], "sum_to_shape: {} does not broadcast to {}",
                shape_str(shape), shape_str(x.shape()));
  }
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  if (!out.device().is_meta()) sum_to_shape_kernels(x.device(), out, x.contiguous());
  return out;
}

Tensor global_l2_norm(std::span<const Tensor> tensors) {
  const trace::OpScope op_scope("global_l2_norm");
  TITAN_CHECK(!tensors.empty(), "global_l2_norm: no tensors");
  std::vector<Tensor> dense;
  dense.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    check_defined("global_l2_norm", t, "tensor");
    check_same_device("global_l2_norm", t, tensors.front());
    dense.push_back(t.contiguous());
  }
  Tensor out = Tensor::empty({}, DType::f32, tensors.front().device());
  if (out.device().is_meta()) return out;
  global_l2_norm_kernels(out.device(), out, dense);
  return out;
}

}  // namespace titan::ops
