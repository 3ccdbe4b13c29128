// The cuBLASLt state behind the CUDA GEMM, made on a problem's first call and
// reused after it, so that later calls neither allocate, query the heuristic
// nor synchronise (a CUDA graph capture of the training step needs all three):
//  - one cuBLASLt handle per device;
//  - one workspace per (device, stream): cuBLASLt kernels keep split-K partial
//    sums and their counters there while they run, so work on two streams
//    must never share one;
//  - one plan per distinct problem: its descriptors and the algorithm the
//    heuristic picked for it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>

namespace titan::ops::cuda {

// One operand in cuBLASLt's (column-major) terms.
struct GemmMatrix {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;            // elements from one column to the next
  int64_t batch_stride = 0;  // elements from one batch entry to the next (0: one matrix shared by the batch)
  uint32_t alignment = 0;    // bytes the data pointer is aligned to (a power of two, at most 256)
  bool operator==(const GemmMatrix&) const = default;
};

// C = alpha * op_a(A) @ op_b(B) + beta * C, `batch` times. Everything the
// heuristic's choice depends on is here (alpha and beta are not: they are
// passed per call), so equal problems can share one plan.
struct GemmProblem {
  int device = 0;
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  GemmMatrix a, b, c;
  int32_t batch = 1;
  // FP8 operands' scales (A_SCALE_MODE and B_SCALE_MODE, the pointers passed
  // per call): none for other GEMMs, else one f32 per matrix or, outer
  // vector, one per row of the result and one per column.
  std::optional<cublasLtMatmulMatrixScale_t> fp8_scales;
  bool operator==(const GemmProblem&) const = default;
};

// The largest power of two (up to cuBLASLt's default assumption of 256) that
// divides the address of every batch entry: kernels with vector loads need the
// alignment they assume, and an entry starts batch_stride_bytes after the last.
inline uint32_t alignment_of(const void* pointer, int64_t batch_stride_bytes = 0) {
  const auto bits = reinterpret_cast<uintptr_t>(pointer) | static_cast<uintptr_t>(batch_stride_bytes);
  const uintptr_t lowest_bit = bits & (~bits + 1);
  return lowest_bit == 0 || lowest_bit > 256 ? 256u : static_cast<uint32_t>(lowest_bit);
}

template <typename Handle, cublasStatus_t (*Destroy)(Handle)>
struct CublasLtDeleter {
  void operator()(Handle handle) const { Destroy(handle); }
};
template <typename Handle, cublasStatus_t (*Destroy)(Handle)>
using CublasLtPtr = std::unique_ptr<std::remove_pointer_t<Handle>, CublasLtDeleter<Handle, Destroy>>;

struct GemmPlan {
  CublasLtPtr<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> desc;
  CublasLtPtr<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> a, b, c;
  cublasLtMatmulAlgo_t algo{};
  bool has_algo = false;  // false: the heuristic found none for this problem
};

struct GemmLaunch {
  cublasLtHandle_t handle = nullptr;
  std::shared_ptr<const GemmPlan> plan;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The handle, workspace and plan for `problem` on the calling thread's current
// device and `stream`, creating whichever is missing.
GemmLaunch gemm_launch(const GemmProblem& problem, cudaStream_t stream);

}  // namespace titan::ops::cuda
