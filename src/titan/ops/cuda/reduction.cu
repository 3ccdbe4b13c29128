// CUDA reductions: sum, mean, max and sum of squares to a 0-d f32 tensor on
// the device, the multi-tensor global L2 norm, and sum_to_shape. Kernels,
// launchers, Tensor plumbing and registration.
//
// Determinism: like the CPU backend, inputs are cut into tiles of
// kReduceTile elements whose number depends only on the size; each tile is
// reduced by one block in f32 into a double partial, and the partials are
// combined by one block in double in a fixed order. No atomics.
#include <cstdint>
#include <limits>
#include <vector>

#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/float_dtype.h"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/reduction.h"

namespace titan::ops::cuda {
namespace {

enum class ReduceKind : int32_t { sum, mean, max, sum_squares };

constexpr int64_t kReduceTile = 4096;
inline int64_t reduce_tiles(int64_t n) { return (n + kReduceTile - 1) / kReduceTile; }

// One non-empty tensor of a global norm; its tiles are partials
// [first_block, first_block + reduce_tiles(numel)).
struct NormTensor {
  const void* data;
  int64_t numel;
  int64_t first_block;
  int32_t bf16;
};

// Sums x (contiguous, shape `sizes`) into out (contiguous), element by element:
// out_strides[d] is x's dim d's stride in out, 0 for a dim summed away (every
// leading dim and every dim out broadcasts from size 1).
constexpr int kMaxSumRank = 8;
struct SumToShapeLayout {
  int rank;
  int64_t sizes[kMaxSumRank];
  int64_t out_strides[kMaxSumRank];
};

constexpr int kTileThreads = 256;
constexpr int kElementsPerThread = static_cast<int>(kReduceTile) / kTileThreads;

// One block reduces x[0, count), count <= kReduceTile, in f32: each thread
// folds its kElementsPerThread elements (strided by the block, so loads coalesce),
// then the block tree. A NaN makes the max NaN, as on the CPU and in torch.max.
template <typename T, bool kMax, bool kSquares>
__device__ float reduce_tile(const T* x, int64_t count, float* scratch) {
  float acc = kMax ? -INFINITY : 0.0f;
  for (int k = 0; k < kElementsPerThread; ++k) {
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

// *out (one f32 on the device) = the reduction of x[0, n), x f32 or bf16.
// `partials` is scratch for reduce_tiles(n) doubles.
cudaError_t launch_reduce(ReduceKind kind, float* out, const void* x, bool x_bf16, int64_t n, double* partials,
                          cudaStream_t stream) {
  return x_bf16 ? reduce_typed(kind, out, static_cast<const __nv_bfloat16*>(x), n, partials, stream)
                : reduce_typed(kind, out, static_cast<const float*>(x), n, partials, stream);
}

// *out = sqrt(sum of squares of every tensor) in one pass over all of them.
// `host_tensors` (count entries, ordered by first_block) is uploaded into
// `device_tensors`; `partials` is scratch for `tiles` doubles (the total).
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

// Scratch for one double partial per tile (8-byte elements; there is no f64
// dtype). The tile kernels launch one block per tile.
Tensor partials_for(int64_t tiles, Device device) {
  TITAN_CHECK(tiles < std::numeric_limits<int32_t>::max(), "reduction of {} tiles is too large for one CUDA grid",
              tiles);
  return Tensor::empty({tiles}, DType::i64, device);
}

ReduceKind kind_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ReduceKind::sum;
    case ReduceOp::mean:
      return ReduceKind::mean;
    case ReduceOp::max:
      return ReduceKind::max;
    case ReduceOp::sum_squares:
      return ReduceKind::sum_squares;
  }
  return ReduceKind::sum;
}

void reduce_kernel(ReduceOp op, const Tensor& out, const Tensor& x) {
  const bool bf16 = is_bf16("reduce", x);
  const Tensor partials = partials_for(reduce_tiles(x.numel()), out.device());
  TITAN_CUDA_CHECK(launch_reduce(kind_of(op), out.data<float>(), x.data_ptr(), bf16, x.numel(),
                                 static_cast<double*>(partials.data_ptr()), current_stream()));
}

void global_l2_norm_kernel(const Tensor& out, std::span<const Tensor> tensors) {
  std::vector<NormTensor> host;
  int64_t tiles = 0;
  for (const Tensor& t : tensors) {
    const bool bf16 = is_bf16("global_l2_norm", t);
    if (t.numel() == 0) continue;  // no tiles: kept out of the tile -> tensor search
    host.push_back({t.data_ptr(), t.numel(), tiles, bf16 ? 1 : 0});
    tiles += reduce_tiles(t.numel());
  }
  const Tensor partials = partials_for(tiles, out.device());
  const Tensor device =
      Tensor::empty({static_cast<int64_t>(host.size() * sizeof(NormTensor))}, DType::u8, out.device());
  TITAN_CUDA_CHECK(launch_global_l2_norm(out.data<float>(), host.data(), static_cast<NormTensor*>(device.data_ptr()),
                                         static_cast<int>(host.size()), tiles,
                                         static_cast<double*>(partials.data_ptr()), current_stream()));
}

void sum_to_shape_kernel(const Tensor& out, const Tensor& x) {
  const bool bf16 = is_bf16("sum_to_shape", x);
  TITAN_CHECK(x.dim() <= kMaxSumRank, "sum_to_shape on {}: rank {} is above the supported {}", x.device().str(),
              x.dim(), kMaxSumRank);
  SumToShapeLayout layout{};
  layout.rank = static_cast<int>(x.dim());
  const int64_t lead = x.dim() - out.dim();
  for (int64_t d = 0; d < x.dim(); ++d) {
    layout.sizes[d] = x.size(d);
    // As the CPU kernel: a dim is kept where out has it with a size other than 1.
    layout.out_strides[d] = d >= lead && out.size(d - lead) != 1 ? out.stride(d - lead) : 0;
  }
  if (out.numel() == 0) return;
  TITAN_CUDA_CHECK(launch_sum_to_shape(out.data_ptr(), x.data_ptr(), bf16, out.numel(), layout, current_stream()));
}

}  // namespace

void register_reduction() {
  reduce_kernels.set_kernel(DeviceType::cuda, reduce_kernel);
  global_l2_norm_kernels.set_kernel(DeviceType::cuda, global_l2_norm_kernel);
  sum_to_shape_kernels.set_kernel(DeviceType::cuda, sum_to_shape_kernel);
}

}  // namespace titan::ops::cuda
