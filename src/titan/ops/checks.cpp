#include "titan/ops/checks.h"

#include <string>

namespace titan::ops {

void check_defined(const char* op, const Tensor& tensor, const char* what) {
  TITAN_CHECK(tensor.defined(), "{}: {} is an undefined tensor", op, what);
}

void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  TITAN_CHECK(a.shape() == b.shape(), "{}: shape mismatch {} vs {}", op, shape_str(a.shape()), shape_str(b.shape()));
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  TITAN_CHECK(a.dtype() == b.dtype(), "{}: dtype mismatch {} vs {} (shapes {} and {})", op, dtype_name(a.dtype()),
              dtype_name(b.dtype()), shape_str(a.shape()), shape_str(b.shape()));
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  TITAN_CHECK(a.device() == b.device(), "{}: device mismatch {} vs {}", op, a.device().str(), b.device().str());
}

void check_dtype(const char* op, const Tensor& tensor, std::initializer_list<DType> allowed, const char* what) {
  for (DType dtype : allowed) {
    if (tensor.dtype() == dtype) return;
  }
  std::string names;
  for (DType dtype : allowed) names += std::string(names.empty() ? "" : ", ") + dtype_name(dtype);
  fail("{}: {} has dtype {} (shape {}), expected one of {}", op, what, dtype_name(tensor.dtype()),
       shape_str(tensor.shape()), names);
}

void check_rank(const char* op, const Tensor& tensor, int64_t rank, const char* what) {
  TITAN_CHECK(tensor.dim() == rank, "{}: {} must be {}-d, got shape {}", op, what, rank, shape_str(tensor.shape()));
}

void check_contiguous(const char* op, const Tensor& tensor, const char* what) {
  TITAN_CHECK(tensor.is_contiguous(), "{}: {} must be contiguous (shape {}, strides {})", op, what,
              shape_str(tensor.shape()), shape_str(tensor.strides()));
}

}  // namespace titan::ops
