// Argument checks shared by op entry points. Each throws titan::Error naming
// the op and the offending shapes or dtypes, so a bad call explains itself.
#pragma once

#include <initializer_list>

#include "titan/core/tensor.h"

namespace titan::ops {

void check_defined(const char* op, const Tensor& tensor, const char* what);
void check_same_shape(const char* op, const Tensor& a, const Tensor& b);
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_dtype(const char* op, const Tensor& tensor, std::initializer_list<DType> allowed, const char* what);
void check_rank(const char* op, const Tensor& tensor, int64_t rank, const char* what);
void check_contiguous(const char* op, const Tensor& tensor, const char* what);

// Whether a kernel has anything to write: an empty output, or one on the meta
// device (shapes only), needs no kernel call.
inline bool has_work(const Tensor& out) { return !out.device().is_meta() && out.numel() > 0; }

}  // namespace titan::ops
