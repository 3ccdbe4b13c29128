// The fp8 tensor-core GEMM (ops::float8_tensor_core_mm) through cuBLASLt's
// FP8 matmul: e4m3 / e5m2 operands, f32 accumulation (fast accumulation
// off), the scales' reciprocals as A_SCALE_POINTER and B_SCALE_POINTER,
// one f32 per matrix (tensorwise) or per row and column of the result
// (rowwise: CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F); and the
// block-scaled MXFP8 GEMM (ops::mx_tensor_core_mm, sm_100: VEC32_UE8M0, one
// e8m0 exponent per 32 codes along K in cuBLASLt's tiled layout). Hopper's FP8
// kernels take only the "TN" layout: in cuBLASLt's column-major terms A
// transposed and B not, i.e. both titan operands K-major, which the op's
// contract asks of its callers. Plans are cached with the other GEMMs'
// (gemm_plan_cache.h), so a call allocates nothing but two small reciprocal
// vectors. Written and compiled without a GPU: never run
// (tests/ops/float8_test.cpp's CudaFloat8 skips here).
#include <cuda_runtime.h>

#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/gemm_cublas_check.h"
#include "titan/ops/cuda/gemm_plan_cache.h"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/float8.h"

namespace titan::ops::cuda {
namespace float8_gemm_device {

__global__ void reciprocals(float* out, const float* scales, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __frcp_rn(scales[i]);
  }
}

// 1 / scale for each scale, repeated to `length` values when one stands for all (outer-vector mode).
Tensor inverse_scales(const Tensor& scales, int64_t length) {
  Tensor out = Tensor::empty({length}, DType::f32, scales.device());
  const Tensor source = scales.numel() == length ? scales : scales.expand({length}).contiguous();
  reciprocals<<<grid_for(length, 256), 256, 0, current_stream()>>>(out.data<float>(), source.data<float>(), length);
  TITAN_CUDA_CHECK(cudaGetLastError());
  return out;
}

cudaDataType_t fp8_type(DType dtype) { return dtype == DType::f8e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

// out = a @ bt^T of fp8 codes (both K-major) with cuBLASLt scaling `mode`:
// `bt_scales` and `a_scales` are device pointers to what the mode reads.
// In cuBLASLt's column-major terms out^T (n x m) = bt^T (bt read as k x n,
// transposed) @ a (k x m), so cuBLASLt's A is bt and its B is a.
void scaled_fp8_matmul(const char* op, const Tensor& out, const Tensor& a, const Tensor& bt,
                       cublasLtMatmulMatrixScale_t mode, const void* bt_scales, const void* a_scales) {
  const int64_t m = a.size(0), k = a.size(1), n = bt.size(0);
  GemmProblem problem;
  TITAN_CUDA_CHECK(cudaGetDevice(&problem.device));
  problem.op_a = CUBLAS_OP_T;
  problem.op_b = CUBLAS_OP_N;
  problem.a = {fp8_type(bt.dtype()),       static_cast<uint64_t>(k), static_cast<uint64_t>(n), k, 0,
               alignment_of(bt.data_ptr())};
  problem.b = {fp8_type(a.dtype()),       static_cast<uint64_t>(k), static_cast<uint64_t>(m), k, 0,
               alignment_of(a.data_ptr())};
  problem.c = {out.dtype() == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F,
               static_cast<uint64_t>(n),
               static_cast<uint64_t>(m),
               n,
               0,
               alignment_of(out.data_ptr())};
  problem.fp8_scales = mode;
  const cudaStream_t stream = current_stream();
  const GemmLaunch launch = gemm_launch(problem, stream);
  TITAN_CHECK(launch.plan->has_algo,
              "{}: cuBLASLt has no algorithm for [{}, {}] x [{}, {}] ({} x {}) -> {}; run the float8 recipes emulated "
              "(quantize.linear.float8.emulate = true)",
              op, m, k, n, k, dtype_name(a.dtype()), dtype_name(bt.dtype()), dtype_name(out.dtype()));
  cublasLtMatmulDesc_t desc = launch.plan->desc.get();
  TITAN_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &bt_scales, sizeof(bt_scales)));
  TITAN_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scales, sizeof(a_scales)));
  const float alpha = 1.0f, beta = 0.0f;
  TITAN_CUBLAS_CHECK(cublasLtMatmul(launch.handle, desc, &alpha, bt.data_ptr(), launch.plan->a.get(), a.data_ptr(),
                                    launch.plan->b.get(), &beta, out.data_ptr(), launch.plan->c.get(), out.data_ptr(),
                                    launch.plan->c.get(), &launch.plan->algo, launch.workspace, launch.workspace_bytes,
                                    stream));
}

void float8_tensor_core_mm_kernel(const Tensor& out, const Tensor& a, const Tensor& a_scale, const Tensor& bt,
                                  const Tensor& b_scale) {
  const int64_t m = a.size(0), n = bt.size(0);
  if (m == 0 || n == 0) return;
  // Tensorwise when both are one value; otherwise both become vectors (a tensorwise W beside a rowwise gradient).
  const bool scalar = a_scale.numel() == 1 && b_scale.numel() == 1;
  const Tensor a_inverse = inverse_scales(a_scale, scalar ? 1 : m), b_inverse = inverse_scales(b_scale, scalar ? 1 : n);
  scaled_fp8_matmul("float8_tensor_core_mm", out, a, bt,
                    scalar ? CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
                    b_inverse.data_ptr(), a_inverse.data_ptr());
}

// Block-scaled MXFP8: the e8m0 exponents in cuBLASLt's tiled layout are what VEC32_UE8M0 reads, as they are.
void mx_tensor_core_mm_kernel(const Tensor& out, const Tensor& a, const Tensor& a_tiles, const Tensor& bt,
                              const Tensor& b_tiles) {
  if (a.size(0) == 0 || bt.size(0) == 0) return;
  scaled_fp8_matmul("mx_tensor_core_mm", out, a, bt, CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0, b_tiles.data_ptr(),
                    a_tiles.data_ptr());
}

// Compute capability 8.9 (Ada) or later: fp8 tensor cores; 10.0 (Blackwell) or later: block-scaled ones.
bool float8_tensor_cores_here() { return compute_capability() >= 89; }
bool mx_tensor_cores_here() { return compute_capability() >= 100; }

}  // namespace float8_gemm_device

void register_float8_gemm() {
  float8_tensor_core_mm_kernels.set_kernel(DeviceType::cuda, float8_gemm_device::float8_tensor_core_mm_kernel);
  float8_tensor_cores_query.set_kernel(DeviceType::cuda, float8_gemm_device::float8_tensor_cores_here);
  mx_tensor_core_mm_kernels.set_kernel(DeviceType::cuda, float8_gemm_device::mx_tensor_core_mm_kernel);
  mx_tensor_cores_query.set_kernel(DeviceType::cuda, float8_gemm_device::mx_tensor_cores_here);
}

}  // namespace titan::ops::cuda
