// Per row, in f32 (the CPU kernel's formulas): z = cap * tanh(x / cap) when
// softcap > 0 (else z = x), lse = max + log(sum exp(z - max)),
// loss = lse - z[target] + z_loss * lse^2, and
//   d(loss)/dx_j = (softmax_j * (1 + 2 z_loss lse) - [j == target]) * scale * (1 - (z_j / cap)^2).
// expf, logf and tanhf are the accurate library versions: the fast intrinsics
// lose up to ~1e-5 relative at the exponents a softmax meets, which the f32
// comparison with the CPU backend would see.
#include <cuda_bf16.h>

#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/fused_cross_entropy_kernels.cuh"

namespace titan::ops::cuda {
namespace {

constexpr int kTargetThreads = 1024;
constexpr int kLossThreads = 1024;
constexpr int kMaxRowThreads = 256;
constexpr int kElementThreads = 256;

__device__ __forceinline__ long long warp_sum_ll(long long v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ long long warp_min_ll(long long v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const long long other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other < v ? other : v;
  }
  return v;
}

template <typename T>
__global__ void read_targets(int64_t* columns, int64_t* summary, float* scale, bool mean, const T* targets,
                             int64_t rows, int64_t vocab, int64_t ignore_index, int64_t offset, int64_t local) {
  __shared__ long long counts[kTargetThreads / kWarpSize];
  __shared__ long long firsts[kTargetThreads / kWarpSize];
  long long counted = 0, first_bad = rows;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const auto value = static_cast<int64_t>(targets[r]);
    int64_t column = kFusedCeIgnored;
    if (value != ignore_index) {
      if (value < 0 || value >= vocab) {
        if (r < first_bad) first_bad = r;
      } else {
        column = value >= offset && value < offset + local ? value - offset : kFusedCeElsewhere;
        ++counted;
      }
    }
    columns[r] = column;
  }
  // Integer sums and minima: exact in any order.
  counted = warp_sum_ll(counted);
  first_bad = warp_min_ll(first_bad);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) {
    counts[warp] = counted;
    firsts[warp] = first_bad;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / kWarpSize;
    counted = lane < warps ? counts[lane] : 0;
    first_bad = lane < warps ? firsts[lane] : rows;
    counted = warp_sum_ll(counted);
    first_bad = warp_min_ll(first_bad);
    if (lane == 0) {
      summary[0] = counted;
      summary[1] = first_bad;
      // The same float division the host would do; 0 when nothing counts (every gradient is then 0).
      scale[0] = !mean ? 1.0f : (counted > 0 ? 1.0f / static_cast<float>(counted) : 0.0f);
    }
  }
}

__device__ __forceinline__ float capped(float x, float cap) { return cap > 0.0f ? cap * tanhf(x / cap) : x; }

// d(loss)/dx for one element from its capped value z.
__device__ __forceinline__ float gradient_of(float z, bool is_target, float lse, float prob_scale, float scale,
                                             float inverse_cap) {
  float g = expf(z - lse) * prob_scale - (is_target ? scale : 0.0f);
  if (inverse_cap > 0.0f) {
    const float t = z * inverse_cap;
    g *= 1.0f - t * t;
  }
  return g;
}

// Writes one row's gradient (or zeros for an ignored row) from its capped logits z.
template <typename G>
__device__ __forceinline__ void gradient_row(const FusedCeTile& tile, const float* z, G* grad, int64_t column,
                                             float lse, bool cap_on_the_way) {
  if (column == kFusedCeIgnored) {
    for (int64_t j = threadIdx.x; j < tile.cols; j += blockDim.x) store_f32(grad, j, 0.0f);
    return;
  }
  const int64_t target = column >= 0 ? column - tile.col_offset : -1;
  const float scale = *tile.scale;
  const float prob_scale = (1.0f + 2.0f * tile.z_loss * lse) * scale;
  const float inverse_cap = tile.softcap > 0.0f ? 1.0f / tile.softcap : 0.0f;
  for (int64_t j = threadIdx.x; j < tile.cols; j += blockDim.x) {
    const float x = cap_on_the_way ? capped(z[j], tile.softcap) : z[j];
    store_f32(grad, j, gradient_of(x, j == target, lse, prob_scale, scale, inverse_cap));
  }
}

// One block per row: caps in place, reduces the row to its max and sum of
// exp(z - max) in one sweep (each thread keeps its own running pair), merges
// them with the row's running state, and on the last chunk finishes the row.
template <typename G>
__global__ void reduce_tile(FusedCeTile tile, FusedCeRows state, bool first, bool last, float* row_loss, G* grad) {
  __shared__ float scratch[kWarpSize];
  __shared__ float target_value;
  __shared__ float row_lse;
  const int64_t r = blockIdx.x;
  float* z = tile.logits + r * tile.stride;
  const int64_t column = tile.columns[r];
  const int64_t target = column >= 0 ? column - tile.col_offset : -1;
  const bool has_target = target >= 0 && target < tile.cols;

  float m = -INFINITY, s = 0.0f;
  for (int64_t j = threadIdx.x; j < tile.cols; j += blockDim.x) {
    float x = z[j];
    if (tile.softcap > 0.0f) {
      x = capped(x, tile.softcap);
      z[j] = x;
    }
    if (j == target) target_value = x;
    if (x > m) {
      s = s * expf(m - x) + 1.0f;  // from (-inf, 0): 0 * 0 + 1
      m = x;
    } else if (x != -INFINITY) {
      s += expf(x - m);  // a NaN logit lands here and poisons the row, as on the CPU
    }
  }
  const float chunk_max = block_max(m, scratch);
  const float chunk_sum = block_sum(m == -INFINITY ? 0.0f : s * expf(m - chunk_max), scratch);
  // block_sum's barriers also publish target_value.
  if (threadIdx.x == 0) {
    const float old_max = first ? -INFINITY : state.running_max[r];
    const float old_sum = first ? 0.0f : state.running_sum[r];
    const float new_max = fmaxf(old_max, chunk_max);
    const float sum = (old_max == -INFINITY ? 0.0f : old_sum * expf(old_max - new_max)) +
                      (chunk_max == -INFINITY ? 0.0f : chunk_sum * expf(chunk_max - new_max));
    state.running_max[r] = new_max;
    state.running_sum[r] = sum;
    const float target_logit = has_target ? target_value : (first ? 0.0f : state.target_logit[r]);
    state.target_logit[r] = target_logit;
    if (last) {
      const float lse = new_max + logf(sum);
      state.lse[r] = lse;
      row_lse = lse;
      if (row_loss != nullptr) {
        row_loss[r] = column == kFusedCeIgnored ? 0.0f : lse - target_logit + tile.z_loss * lse * lse;
      }
    }
  }
  if (!last || grad == nullptr) return;
  __syncthreads();
  // Each thread reads back only the elements it capped itself; grad may alias z.
  gradient_row(tile, z, grad + r * tile.stride, column, row_lse, /*cap_on_the_way=*/false);
}

template <typename G>
__global__ void gradient_tile(FusedCeTile tile, FusedCeRows state, bool capped_already, G* grad) {
  const int64_t r = blockIdx.x;
  gradient_row(tile, tile.logits + r * tile.stride, grad + r * tile.stride, tile.columns[r], state.lse[r],
               !capped_already);
}

__global__ void row_losses(float* row_loss, const int64_t* columns, FusedCeRows state, int64_t rows, float z_loss) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float lse = state.lse[r];
    row_loss[r] = columns[r] == kFusedCeIgnored ? 0.0f : lse - state.target_logit[r] + z_loss * lse * lse;
  }
}

// One block, so the order of the additions is fixed by its shape alone.
__global__ void total_loss(float* loss, const float* row_loss, int64_t rows, const int64_t* counted_rows, bool mean) {
  const int64_t counted = *counted_rows;
  __shared__ double scratch[kWarpSize];
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_loss[r];
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) {
    const double reduced = counted == 0 ? 0.0 : (mean ? sum / static_cast<double>(counted) : sum);
    loss[0] = static_cast<float>(reduced);
  }
}

// Threads per row block: enough warps to cover the row, at most kMaxRowThreads.
int row_threads(int64_t cols) {
  const int64_t warps = (cols + kWarpSize - 1) / kWarpSize;
  const int64_t threads = warps * kWarpSize;
  return static_cast<int>(threads < kWarpSize ? kWarpSize : (threads > kMaxRowThreads ? kMaxRowThreads : threads));
}

}  // namespace

cudaError_t launch_fused_ce_targets(int64_t* columns, int64_t* summary, float* scale, bool mean, const void* targets,
                                    bool targets_i64, int64_t rows, int64_t vocab, int64_t ignore_index, int64_t offset,
                                    int64_t local, cudaStream_t stream) {
  if (targets_i64) {
    read_targets<<<1, kTargetThreads, 0, stream>>>(columns, summary, scale, mean, static_cast<const int64_t*>(targets),
                                                   rows, vocab, ignore_index, offset, local);
  } else {
    read_targets<<<1, kTargetThreads, 0, stream>>>(columns, summary, scale, mean, static_cast<const int32_t*>(targets),
                                                   rows, vocab, ignore_index, offset, local);
  }
  return cudaGetLastError();
}

cudaError_t launch_fused_ce_reduce_tile(const FusedCeTile& tile, const FusedCeRows& state, bool first, bool last,
                                        float* row_loss, cudaStream_t stream) {
  if (tile.rows == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(tile.rows);
  const int threads = row_threads(tile.cols);
  if (tile.grad_bf16 && tile.grad != nullptr) {
    reduce_tile<<<grid, threads, 0, stream>>>(tile, state, first, last, row_loss,
                                              static_cast<__nv_bfloat16*>(tile.grad));
  } else {
    reduce_tile<<<grid, threads, 0, stream>>>(tile, state, first, last, row_loss, static_cast<float*>(tile.grad));
  }
  return cudaGetLastError();
}

cudaError_t launch_fused_ce_gradient_tile(const FusedCeTile& tile, const FusedCeRows& state, bool capped,
                                          cudaStream_t stream) {
  if (tile.rows == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(tile.rows);
  const int threads = row_threads(tile.cols);
  if (tile.grad_bf16) {
    gradient_tile<<<grid, threads, 0, stream>>>(tile, state, capped, static_cast<__nv_bfloat16*>(tile.grad));
  } else {
    gradient_tile<<<grid, threads, 0, stream>>>(tile, state, capped, static_cast<float*>(tile.grad));
  }
  return cudaGetLastError();
}

cudaError_t launch_fused_ce_row_losses(float* row_loss, const int64_t* columns, const FusedCeRows& state, int64_t rows,
                                       float z_loss, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  row_losses<<<grid_for(rows, kElementThreads), kElementThreads, 0, stream>>>(row_loss, columns, state, rows, z_loss);
  return cudaGetLastError();
}

cudaError_t launch_fused_ce_total_loss(float* loss, const float* row_loss, int64_t rows, const int64_t* counted,
                                       bool mean, cudaStream_t stream) {
  total_loss<<<1, kLossThreads, 0, stream>>>(loss, row_loss, rows, counted, mean);
  return cudaGetLastError();
}

}  // namespace titan::ops::cuda
