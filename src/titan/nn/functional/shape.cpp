// Differentiable views, copies and casts.
#include "titan/autograd/function_node.h"
#include "titan/core/copy.h"
#include "titan/nn/functional.h"
#include "titan/ops/reduction.h"

namespace titan::F {

using autograd::record;

Tensor view(const Tensor& x, const Shape& shape) {
  Tensor y = x.view(shape);
  const Shape original = x.shape();
  record("ViewBackward", {&x}, {&y}, [original](const auto& g) { return std::vector<Tensor>{g[0].reshape(original)}; });
  return y;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor y = x.reshape(shape);
  if (y.is_same(x)) y = x.detach();
  const Shape original = x.shape();
  record("ReshapeBackward", {&x}, {&y},
         [original](const auto& g) { return std::vector<Tensor>{g[0].reshape(original)}; });
  return y;
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  Tensor y = x.transpose(d0, d1);
  record("TransposeBackward", {&x}, {&y},
         [d0, d1](const auto& g) { return std::vector<Tensor>{g[0].transpose(d0, d1)}; });
  return y;
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& order) {
  Tensor y = x.permute(order);
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    inverse[static_cast<size_t>(x.wrap_dim(order[i]))] = static_cast<int64_t>(i);
  record("PermuteBackward", {&x}, {&y},
         [inverse](const auto& g) { return std::vector<Tensor>{g[0].permute(inverse)}; });
  return y;
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor y = x.contiguous();
  record("ContiguousBackward", {&x}, {&y}, [](const auto& g) { return std::vector<Tensor>{g[0]}; });
  return y;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  Tensor y = x.expand(shape);
  const Shape original = x.shape();
  record("ExpandBackward", {&x}, {&y},
         [original](const auto& g) { return std::vector<Tensor>{ops::sum_to_shape(g[0], original)}; });
  return y;
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  Tensor y = x.narrow(dim, start, length);
  const Shape original = x.shape();
  const DType dtype = x.dtype();
  record("NarrowBackward", {&x}, {&y}, [=](const auto& g) {
    Tensor full = Tensor::zeros(original, dtype, g[0].device());
    titan::copy_(full.narrow(dim, start, length), g[0]);
    return std::vector<Tensor>{full};
  });
  return y;
}

Tensor concat(const Tensor& a, const Tensor& b, int64_t dim) {
  const int64_t d = a.wrap_dim(dim);
  TITAN_CHECK(a.dim() == b.dim() && a.dtype() == b.dtype(), "concat: {} {} and {} {} differ in rank or dtype",
              shape_str(a.shape()), dtype_name(a.dtype()), shape_str(b.shape()), dtype_name(b.dtype()));
  Shape shape = a.shape();
  for (int64_t i = 0; i < a.dim(); ++i) {
    TITAN_CHECK(i == d || a.size(i) == b.size(i), "concat: {} and {} differ outside dim {}", shape_str(a.shape()),
                shape_str(b.shape()), d);
  }
  const int64_t first = a.size(d), second = b.size(d);
  shape[static_cast<size_t>(d)] = first + second;
  Tensor y = Tensor::empty(shape, a.dtype(), a.device());
  titan::copy_(y.narrow(d, 0, first), a);
  titan::copy_(y.narrow(d, first, second), b);
  record("ConcatBackward", {&a, &b}, {&y}, [d, first, second](const auto& g) {
    return std::vector<Tensor>{g[0].narrow(d, 0, first).contiguous(), g[0].narrow(d, first, second).contiguous()};
  });
  return y;
}

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor y = titan::cast(x, dtype);
  const DType original = x.dtype();
  record("CastBackward", {&x}, {&y},
         [original](const auto& g) { return std::vector<Tensor>{titan::cast(g[0], original)}; });
  return y;
}

}  // namespace titan::F
