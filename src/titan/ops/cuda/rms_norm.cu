// CUDA RMSNorm, forward and backward: kernels, launchers, Tensor plumbing and
// registration. x [rows, dim] and weight [dim] contiguous, one dtype (f32 or
// bf16); rstd [rows] f32. The entry points in ops/rms_norm.cpp pass contiguous
// x, weight and rstd.
//
// Forward and grad_x: one block per row, f32 block reductions in a fixed
// order. grad_weight = sum over rows of dy * xhat is reduced in two
// deterministic steps instead of with atomics: each chunk of rows sums its
// rows in order into scratch (one thread per column, so reads are coalesced),
// then one thread per column adds the chunks in order. Chunks are 32 rows (the
// CPU's block, so the rounding structure matches it) unless that would make
// more than kMaxChunks of them, which bounds the scratch to kMaxChunks * dim.
#include <cstdint>

#include "titan/core/dtype.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/float_dtype.h"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/rms_norm.h"

namespace titan::ops::cuda {
namespace {

constexpr int kColumnThreads = 256;
constexpr int64_t kMinChunkRows = 32;
constexpr int64_t kMaxChunks = 1024;

template <typename T>
__global__ void rms_norm_forward(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                                 const T* __restrict__ weight, float eps, int64_t rows, int64_t dim) {
  __shared__ float scratch[kWarpSize];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * dim;
    T* yr = y + row * dim;
    float sum_squares = 0.0f;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      const float v = load_f32(xr, c);
      sum_squares += v * v;
    }
    sum_squares = block_sum(sum_squares, scratch);
    const float inv = 1.0f / sqrtf(sum_squares / static_cast<float>(dim) + eps);
    if (threadIdx.x == 0) rstd[row] = inv;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
      store_f32(yr, c, load_f32(xr, c) * inv * load_f32(weight, c));
  }
}

// dx = rstd * (dy*w - xhat * mean(dy*w*xhat)) with xhat = x * rstd.
template <typename T>
__global__ void rms_norm_grad_x(T* __restrict__ grad_x, const T* __restrict__ grad_y, const T* __restrict__ x,
                                const T* __restrict__ weight, const float* __restrict__ rstd, int64_t rows,
                                int64_t dim) {
  __shared__ float scratch[kWarpSize];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * dim;
    const float inv = rstd[row];
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      dot += load_f32(grad_y, base + c) * load_f32(weight, c) * (load_f32(x, base + c) * inv);
    }
    const float mean_dot = block_sum(dot, scratch) / static_cast<float>(dim);
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      const float xhat = load_f32(x, base + c) * inv;
      store_f32(grad_x, base + c, inv * (load_f32(grad_y, base + c) * load_f32(weight, c) - xhat * mean_dot));
    }
  }
}

// partial[chunk, c] = sum over the chunk's rows, in order, of dy * xhat.
// Grid: x over column tiles, y over chunks.
template <typename T>
__global__ void rms_norm_grad_weight_partial(float* __restrict__ partial, const T* __restrict__ grad_y,
                                             const T* __restrict__ x, const float* __restrict__ rstd, int64_t rows,
                                             int64_t dim, int64_t chunk_rows) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  const int64_t first = blockIdx.y * chunk_rows;
  const int64_t last = first + chunk_rows < rows ? first + chunk_rows : rows;
  float sum = 0.0f;
  for (int64_t row = first; row < last; ++row) {
    sum += load_f32(grad_y, row * dim + c) * (load_f32(x, row * dim + c) * rstd[row]);
  }
  partial[blockIdx.y * dim + c] = sum;
}

template <typename T>
__global__ void rms_norm_grad_weight_total(T* __restrict__ grad_weight, const float* __restrict__ partial,
                                           int64_t chunks, int64_t dim) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= dim) return;
  float total = 0.0f;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) total += partial[chunk * dim + c];
  store_f32(grad_weight, c, total);
}

int64_t chunk_rows_for(int64_t rows) {
  const int64_t spread = (rows + kMaxChunks - 1) / kMaxChunks;
  return spread > kMinChunkRows ? spread : kMinChunkRows;
}

int64_t chunks_for(int64_t rows) {
  const int64_t chunk_rows = chunk_rows_for(rows);
  return (rows + chunk_rows - 1) / chunk_rows;
}

template <typename T>
void launch_backward_typed(void* grad_x, void* grad_weight, const void* grad_y, const void* x, const void* weight,
                           const float* rstd, float* scratch, int64_t rows, int64_t dim, cudaStream_t stream) {
  const auto* dy = static_cast<const T*>(grad_y);
  const auto* xs = static_cast<const T*>(x);
  if (rows > 0) {
    rms_norm_grad_x<<<norm_blocks(rows), norm_threads(dim), 0, stream>>>(
        static_cast<T*>(grad_x), dy, xs, static_cast<const T*>(weight), rstd, rows, dim);
  }
  const auto column_tiles = static_cast<unsigned>((dim + kColumnThreads - 1) / kColumnThreads);
  const int64_t chunks = chunks_for(rows);
  if (chunks > 0) {
    rms_norm_grad_weight_partial<<<dim3(column_tiles, static_cast<unsigned>(chunks)), kColumnThreads, 0, stream>>>(
        scratch, dy, xs, rstd, rows, dim, chunk_rows_for(rows));
  }
  // Also runs for rows == 0, where grad_weight is zeros.
  rms_norm_grad_weight_total<<<column_tiles, kColumnThreads, 0, stream>>>(static_cast<T*>(grad_weight), scratch, chunks,
                                                                          dim);
}

cudaError_t launch_rms_norm(DType dtype, void* y, float* rstd, const void* x, const void* weight, float eps,
                            int64_t rows, int64_t dim, cudaStream_t stream) {
  if (rows == 0 || dim == 0) return cudaSuccess;
  if (dtype == DType::bf16) {
    rms_norm_forward<<<norm_blocks(rows), norm_threads(dim), 0, stream>>>(
        static_cast<__nv_bfloat16*>(y), rstd, static_cast<const __nv_bfloat16*>(x),
        static_cast<const __nv_bfloat16*>(weight), eps, rows, dim);
  } else {
    rms_norm_forward<<<norm_blocks(rows), norm_threads(dim), 0, stream>>>(
        static_cast<float*>(y), rstd, static_cast<const float*>(x), static_cast<const float*>(weight), eps, rows, dim);
  }
  return cudaGetLastError();
}

// f32 elements of device scratch launch_rms_norm_backward needs (per-chunk
// partial sums of grad_weight, reduced in a fixed order: no float atomics).
int64_t rms_norm_backward_scratch_size(int64_t rows, int64_t dim) { return chunks_for(rows) * dim; }

cudaError_t launch_rms_norm_backward(DType dtype, void* grad_x, void* grad_weight, const void* grad_y, const void* x,
                                     const void* weight, const float* rstd, float* scratch, int64_t rows, int64_t dim,
                                     cudaStream_t stream) {
  if (dim == 0) return cudaSuccess;
  if (dtype == DType::bf16) {
    launch_backward_typed<__nv_bfloat16>(grad_x, grad_weight, grad_y, x, weight, rstd, scratch, rows, dim, stream);
  } else {
    launch_backward_typed<float>(grad_x, grad_weight, grad_y, x, weight, rstd, scratch, rows, dim, stream);
  }
  return cudaGetLastError();
}

void rms_norm_kernel(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight, float eps) {
  require_float("rms_norm", x);
  const int64_t dim = x.size(-1);
  const int64_t rows = dim == 0 ? 0 : x.numel() / dim;
  TITAN_CUDA_CHECK(launch_rms_norm(x.dtype(), y.data_ptr(), static_cast<float*>(rstd.data_ptr()), x.data_ptr(),
                                   weight.data_ptr(), eps, rows, dim, current_stream()));
}

void rms_norm_backward_kernel(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_y, const Tensor& x,
                              const Tensor& weight, const Tensor& rstd) {
  require_float("rms_norm_backward", x);
  TITAN_CHECK(rstd.dtype() == DType::f32 && rstd.device() == x.device(),
              "rms_norm_backward: rstd must be f32 on {}, got {} on {}", x.device().str(), dtype_name(rstd.dtype()),
              rstd.device().str());
  const int64_t dim = x.size(-1);
  const int64_t rows = dim == 0 ? 0 : x.numel() / dim;
  TITAN_CHECK(rstd.numel() == rows, "rms_norm_backward: rstd has {} values for {} rows", rstd.numel(), rows);
  // Freed when this returns; the allocator orders reuse after the kernels on this stream.
  Tensor scratch = Tensor::empty({rms_norm_backward_scratch_size(rows, dim)}, DType::f32, x.device());
  TITAN_CUDA_CHECK(launch_rms_norm_backward(x.dtype(), grad_x.data_ptr(), grad_weight.data_ptr(), grad_y.data_ptr(),
                                            x.data_ptr(), weight.data_ptr(), static_cast<const float*>(rstd.data_ptr()),
                                            static_cast<float*>(scratch.data_ptr()), rows, dim, current_stream()));
}

}  // namespace

void register_rms_norm() {
  rms_norm_kernels.set_kernel(DeviceType::cuda, rms_norm_kernel);
  rms_norm_backward_kernels.set_kernel(DeviceType::cuda, rms_norm_backward_kernel);
}

}  // namespace titan::ops::cuda
