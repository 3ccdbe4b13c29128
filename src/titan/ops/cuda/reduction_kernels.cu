#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/reduction_kernels.cuh"

namespace titan::ops::cuda {
namespace {

constexpr int kTileThreads = 256;
constexpr int kPerThread = static_cast<int>(kReduceTile) / kTileThreads;
constexpr int kFinishThreads = 1024;

// One block reduces x[0, count), count <= kReduceTile, in f32: each thread
// folds its kPerThread elements (strided by the block, so loads coalesce),
// then the block tree. A NaN makes the max NaN, as on the CPU and in torch.max.
template <typename T, bool kMax, bool kSquares>
__device__ float reduce_tile(const T* x, int64_t count, float* scratch) {
  float acc = kMax ? -INFINITY : 0.0f;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t i = static_cast<int64_t>(k) * kTileThreads + threadIdx.x;
    if (i < count) {
      const float v = load_f32(x, i);
      if constexpr (kMax) {
        acc = nan_max(acc, v);
      } else {
        acc += kSquares ? v * v : v;
      }
    }
  }
  return kMax ? block_max(acc, scratch) : block_sum(acc, scratch);
}

template <typename T, bool kMax, bool kSquares>
__global__ void __launch_bounds__(kTileThreads) tile_partials(const T* x, int64_t n, double* partials) {
  __shared__ float scratch[kWarpSize];
  const int64_t start = static_cast<int64_t>(blockIdx.x) * kReduceTile;
  const int64_t count = n - start < kReduceTile ? n - start : kReduceTile;
  const float result = reduce_tile<T, kMax, kSquares>(x + start, count, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = result;
}

__global__ void __launch_bounds__(kTileThreads) norm_tiles(const NormTensor* tensors, int count, double* partials) {
  __shared__ float scratch[kWarpSize];
  const NormTensor t = tensors[owner_of_block(tensors, count, blockIdx.x)];
  const int64_t start = (static_cast<int64_t>(blockIdx.x) - t.first_block) * kReduceTile;
  const int64_t rest = t.numel - start < kReduceTile ? t.numel - start : kReduceTile;
  // The branch is uniform over the block: a tile belongs to one tensor.
  const float result =
      t.bf16 ? reduce_tile<__nv_bfloat16, false, true>(static_cast<const __nv_bfloat16*>(t.data) + start, rest, scratch)
             : reduce_tile<float, false, true>(static_cast<const float*>(t.data) + start, rest, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = result;
}

// Combines the partials in double (max in f32, where it is exact) into *out.
// `n` is the element count, for the mean.
__global__ void __launch_bounds__(kFinishThreads)
    finish(const double* partials, int64_t count, ReduceKind kind, int64_t n, bool square_root, float* out) {
  __shared__ double scratch[kWarpSize];
  __shared__ float max_scratch[kWarpSize];
  if (kind == ReduceKind::max) {
    float best = -INFINITY;
    for (int64_t i = threadIdx.x; i < count; i += kFinishThreads) best = nan_max(best, static_cast<float>(partials[i]));
    best = block_max(best, max_scratch);
    if (threadIdx.x == 0) *out = best;
    return;
  }
  double total = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kFinishThreads) total += partials[i];
  total = block_sum(total, scratch);
  if (threadIdx.x != 0) return;
  if (kind == ReduceKind::mean) total /= static_cast<double>(n);  // 0 / 0 = NaN for an empty tensor, as on the CPU
  if (square_root) total = sqrt(total);
  *out = static_cast<float>(total);
}

template <typename T>
cudaError_t reduce_typed(ReduceKind kind, float* out, const T* x, int64_t n, double* partials, cudaStream_t stream) {
  const int64_t tiles = reduce_tiles(n);
  if (tiles > 0) {
    const auto grid = static_cast<unsigned int>(tiles);
    switch (kind) {
      case ReduceKind::max:
        tile_partials<T, true, false><<<grid, kTileThreads, 0, stream>>>(x, n, partials);
        break;
      case ReduceKind::sum_squares:
        tile_partials<T, false, true><<<grid, kTileThreads, 0, stream>>>(x, n, partials);
        break;
      default:
        tile_partials<T, false, false><<<grid, kTileThreads, 0, stream>>>(x, n, partials);
        break;
    }
  }
  finish<<<1, kFinishThreads, 0, stream>>>(partials, tiles, kind, n, false, out);
  return cudaGetLastError();
}

// out[o] = the sum of the x elements that broadcast from o, added in double in
// x's element order: the CPU kernel's order, hence its exact result.
template <typename T>
__global__ void sum_to_shape(T* out, const T* x, int64_t out_numel, SumToShapeLayout layout) {
  int64_t x_strides[kMaxSumRank];
  int64_t stride = 1, summed = 1;
  for (int d = layout.rank - 1; d >= 0; --d) {
    x_strides[d] = stride;
    stride *= layout.sizes[d];
    if (layout.out_strides[d] == 0) summed *= layout.sizes[d];
  }
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < out_numel;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // out is row-major over the kept dims (its other dims have size 1).
    int64_t offset = 0, rest = o;
    for (int d = layout.rank - 1; d >= 0; --d) {
      if (layout.out_strides[d] == 0) continue;
      offset += rest % layout.sizes[d] * x_strides[d];
      rest /= layout.sizes[d];
    }
    int64_t index[kMaxSumRank] = {};
    double acc = 0.0;
    for (int64_t r = 0; r < summed; ++r) {
      acc += load_f32(x, offset);
      for (int d = layout.rank - 1; d >= 0; --d) {  // next summed position, last dim fastest
        if (layout.out_strides[d] != 0) continue;
        offset += x_strides[d];
        if (++index[d] < layout.sizes[d]) break;
        offset -= x_strides[d] * layout.sizes[d];
        index[d] = 0;
      }
    }
    store_f32(out, o, static_cast<float>(acc));
  }
}

}  // namespace

cudaError_t launch_reduce(ReduceKind kind, float* out, const void* x, bool x_bf16, int64_t n, double* partials,
                          cudaStream_t stream) {
  return x_bf16 ? reduce_typed(kind, out, static_cast<const __nv_bfloat16*>(x), n, partials, stream)
                : reduce_typed(kind, out, static_cast<const float*>(x), n, partials, stream);
}

cudaError_t launch_global_l2_norm(float* out, const NormTensor* host_tensors, NormTensor* device_tensors, int count,
                                  int64_t tiles, double* partials, cudaStream_t stream) {
  if (tiles > 0) {
    const cudaError_t status = upload_async(device_tensors, host_tensors, sizeof(NormTensor) * count, stream);
    if (status != cudaSuccess) return status;
    norm_tiles<<<static_cast<unsigned int>(tiles), kTileThreads, 0, stream>>>(device_tensors, count, partials);
  }
  finish<<<1, kFinishThreads, 0, stream>>>(partials, tiles, ReduceKind::sum, 0, true, out);
  return cudaGetLastError();
}

cudaError_t launch_sum_to_shape(void* out, const void* x, bool bf16, int64_t out_numel, const SumToShapeLayout& layout,
                                cudaStream_t stream) {
  if (out_numel == 0) return cudaSuccess;
  const unsigned int grid = grid_for(out_numel, 256);
  if (bf16) {
    sum_to_shape<<<grid, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(x),
                                           out_numel, layout);
  } else {
    sum_to_shape<<<grid, 256, 0, stream>>>(static_cast<float*>(out), static_cast<const float*>(x), out_numel, layout);
  }
  return cudaGetLastError();
}

}  // namespace titan::ops::cuda
