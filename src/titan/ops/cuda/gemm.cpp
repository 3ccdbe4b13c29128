// CUDA GEMM through cuBLASLt: C = alpha * A @ B + beta * C, f32 accumulation.
//
// cuBLASLt is column-major and titan's tensors are row-major, so it computes
// the transpose instead: C^T = B^T @ A^T. A row-major [r, c] matrix with rows
// sr apart is, read column-major, its own transpose (c x r, ld = sr), so a
// row-major operand is passed as is with CUBLAS_OP_N; a transposed view (unit
// stride along its rows) is a column-major r x c matrix, and CUBLAS_OP_T
// makes cuBLASLt transpose it back. Nothing is ever copied for a transpose.
// cuBLASLt's A is titan's B and the other way round; C (unit stride along a
// row, as the entry point guarantees) is an n x m column-major matrix.
//
// Batches are strided batches; a batch-1 operand broadcasts with a batch
// stride of 0. Each distinct problem (layouts, dtypes, transposes, batch and
// pointer alignments) gets its descriptors and the heuristic's algorithm once
// (gemm_plan_cache.h); afterwards a call only launches on current_stream(),
// with no allocation and no synchronisation, so it can be captured in a CUDA
// graph. The exceptions allocate per call: f32 A and B with a bf16 C, which
// cuBLASLt has no kernel for, go through an f32 copy of C (as on the CPU);
// a problem the heuristic finds no algorithm for is run one batch entry at a
// time, and failing that on fresh contiguous copies of its operands.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "titan/core/copy.h"
#include "titan/ops/checks.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/gemm_cublas_check.h"
#include "titan/ops/cuda/gemm_plan_cache.h"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/gemm.h"

namespace titan::ops::cuda {
namespace {

cudaDataType_t to_cuda(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      unsupported_dtype("gemm", Device::cuda(), dtype);
  }
}

int64_t batch_stride_of(const Tensor& t, int32_t batch) {
  return batch > 1 && t.dim() == 3 && t.size(0) > 1 ? t.stride(0) : 0;
}

struct Operand {
  cublasOperation_t op = CUBLAS_OP_N;
  GemmMatrix matrix;
};

// X^T for X = the last two dims of t ([r, c], row-major indexing), as a
// column-major cuBLASLt operand, or nothing when neither inner dim has unit
// stride with the other stride usable as a leading dimension (an expanded
// view, say): such an operand is copied first.
std::optional<Operand> transposed_operand(const Tensor& t, int32_t batch) {
  const int64_t r = t.size(-2), c = t.size(-1), sr = t.stride(-2), sc = t.stride(-1);
  Operand operand;
  int64_t rows = 0, cols = 0, ld = 0;
  if ((sc == 1 || c == 1) && (r == 1 ? c : sr) >= std::max<int64_t>(c, 1)) {
    // Row-major X: read column-major it is X^T, c x r, columns sr apart (with
    // a single column any ld >= c will do).
    operand.op = CUBLAS_OP_N;
    rows = c;
    cols = r;
    ld = r == 1 ? c : sr;
  } else if ((sr == 1 || r == 1) && (c == 1 ? r : sc) >= std::max<int64_t>(r, 1)) {
    // A transposed view: column-major X, r x c with columns sc apart; OP_T transposes it back.
    operand.op = CUBLAS_OP_T;
    rows = r;
    cols = c;
    ld = c == 1 ? r : sc;
  } else {
    return std::nullopt;
  }
  const int64_t batch_stride = batch_stride_of(t, batch);
  operand.matrix = {to_cuda(t.dtype()),
                    static_cast<uint64_t>(rows),
                    static_cast<uint64_t>(cols),
                    ld,
                    batch_stride,
                    alignment_of(t.data_ptr(), batch_stride * static_cast<int64_t>(t.element_size()))};
  return operand;
}

// The batch entry `index` of an operand as a 2-d view (a batch-1 or 2-d operand broadcasts).
Tensor entry_of(const Tensor& t, int64_t index) {
  if (t.dim() == 2) return t;
  return t.select(0, t.size(0) == 1 ? 0 : index);
}

// `repacked`: the operands are already fresh contiguous copies (the last resort below).
void run_gemm(const Tensor& a, const Tensor& b, const Tensor& c, float alpha, float beta, bool repacked = false) {
  const int64_t m = a.size(-2), n = b.size(-1);
  const int64_t batch64 = c.dim() == 3 ? c.size(0) : 1;
  TITAN_CHECK(batch64 <= std::numeric_limits<int32_t>::max(), "gemm on cuda: batch {} exceeds cuBLASLt's int32 count",
              batch64);
  const auto batch = static_cast<int32_t>(batch64);
  const std::optional<Operand> a_t = transposed_operand(a, batch);
  if (!a_t) return run_gemm(a.contiguous(), b, c, alpha, beta);
  const std::optional<Operand> b_t = transposed_operand(b, batch);
  if (!b_t) return run_gemm(a, b.contiguous(), c, alpha, beta);
  const int64_t ldc = m == 1 ? n : c.stride(-2);
  TITAN_CHECK(ldc >= n && (batch == 1 || c.stride(0) != 0),
              "gemm on cuda: C {} with strides {} has overlapping rows or batch entries", shape_str(c.shape()),
              shape_str(c.strides()));

  GemmProblem problem;
  TITAN_CUDA_CHECK(cudaGetDevice(&problem.device));
  // C^T = B^T @ A^T: cuBLASLt's A is B^T and its B is A^T.
  problem.op_a = b_t->op;
  problem.a = b_t->matrix;
  problem.op_b = a_t->op;
  problem.b = a_t->matrix;
  problem.c = {to_cuda(c.dtype()),
               static_cast<uint64_t>(n),
               static_cast<uint64_t>(m),
               ldc,
               batch_stride_of(c, batch),
               alignment_of(c.data_ptr(), batch_stride_of(c, batch) * static_cast<int64_t>(c.element_size()))};
  problem.batch = batch;

  const cudaStream_t stream = current_stream();
  const GemmLaunch launch = gemm_launch(problem, stream);
  const GemmPlan& plan = *launch.plan;
  if (!plan.has_algo) {
    // Some strided-batch layouts (a broadcast operand, odd batch strides) have
    // no batched kernel; the entries one at a time always do.
    if (batch > 1) {
      for (int64_t i = 0; i < batch; ++i) run_gemm(entry_of(a, i), entry_of(b, i), c.select(0, i), alpha, beta);
      return;
    }
    if (!repacked) {
      // Last resort for odd views (a pointer aligned to one element, a wide
      // leading dimension): fresh contiguous copies, which the allocator
      // aligns, and C through a fresh buffer as well.
      const Tensor packed_c = beta != 0.0f ? c.clone() : Tensor::empty(c.shape(), c.dtype(), c.device());
      run_gemm(a.clone(), b.clone(), packed_c, alpha, beta, /*repacked=*/true);
      copy_(c, packed_c);
      return;
    }
    fail("gemm on cuda: cuBLASLt has no algorithm for A {} strides {} ({}) @ B {} strides {} -> C {} strides {} ({})",
         shape_str(a.shape()), shape_str(a.strides()), dtype_name(a.dtype()), shape_str(b.shape()),
         shape_str(b.strides()), shape_str(c.shape()), shape_str(c.strides()), dtype_name(c.dtype()));
  }
  // D = C: cuBLASLt allows the output in place of the accumulated input when
  // both have the same layout. With beta = 0, C is not read (it may hold garbage).
  TITAN_CUBLAS_CHECK(cublasLtMatmul(launch.handle, plan.desc.get(), &alpha, b.data_ptr(), plan.a.get(), a.data_ptr(),
                                    plan.b.get(), &beta, c.data_ptr(), plan.c.get(), c.data_ptr(), plan.c.get(),
                                    &plan.algo, launch.workspace, launch.workspace_bytes, stream));
}

void gemm_kernel(const Tensor& a, const Tensor& b, const Tensor& c, float alpha, float beta) {
  if (a.dtype() == DType::f32 && c.dtype() == DType::bf16) {
    // No f32 x f32 -> bf16 matmul in cuBLASLt: accumulate in f32, round once.
    const Tensor staged =
        beta != 0.0f ? c.to(DType::f32).contiguous() : Tensor::empty(c.shape(), DType::f32, c.device());
    run_gemm(a, b, staged, alpha, beta);
    copy_(c, staged);
    return;
  }
  run_gemm(a, b, c, alpha, beta);
}

}  // namespace

void register_gemm() { gemm_kernels.set_kernel(DeviceType::cuda, gemm_kernel); }

}  // namespace titan::ops::cuda
