// The dtype check of the CUDA ops whose kernels exist for f32 and bf16 only:
// any other dtype is the op's unsupported-dtype error (core/dispatch.h).
// Defined once here so that the kernel files also compile together in one
// translation unit (the CUDA batches of src/titan/CMakeLists.txt).
#pragma once

#include "titan/core/dispatch.h"
#include "titan/core/dtype.h"
#include "titan/core/tensor.h"

namespace titan::ops::cuda {

// Returns when t is f32 or bf16, else raises the op's unsupported-dtype error.
inline void require_float(const char* op, const Tensor& t) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16) unsupported_dtype(op, t.device(), t.dtype());
}

// f32 or bf16 (true), else the op's unsupported-dtype error.
inline bool is_bf16(const char* op, const Tensor& t) {
  require_float(op, t);
  return t.dtype() == DType::bf16;
}

}  // namespace titan::ops::cuda
