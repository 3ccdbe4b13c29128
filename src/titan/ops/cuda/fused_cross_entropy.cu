// CUDA fused linear cross-entropy: cross_entropy(hidden @ weight^T, targets)
// and both input gradients without ever holding the N x V logits: the row
// kernels and their launchers, the device's side of the tile loop it shares
// with the CPU (ops/fused_cross_entropy_tiles.h), and the registration.
//
// The algorithm, its formulas and its memory are the CPU kernel's (see the
// header comment of ops/cpu/kernels/cross_entropy.cpp): token chunks of tc
// rows are the outer loop and vocabulary chunks of vc columns the inner one;
// each tile of logits is one GEMM through ops::gemm (cuBLASLt) into an f32
// buffer; one vocabulary chunk lets each row become its gradient as soon as
// its lse is known, a split vocabulary keeps an online (max, sum) per row in
// pass 1 and recomputes every tile in pass 2. Gradients accumulate through
// GEMMs with beta = 1 (beta = 0 on the first), in a fixed order.
//
// What differs on the GPU:
//  - Row kernels do the capping, online log-sum-exp, target gather and
//    gradient, one block per tile row, and reduce in an order fixed by the
//    block shape: no atomics, the same bits on every run.
//  - Targets are checked and counted on the device, and the scale of every
//    gradient (1 / count for a mean) is computed there too and read by the
//    kernels from device memory. Eagerly, the count and the first bad row
//    come back to the host with the one synchronisation of the call, before
//    any GEMM, so an out-of-range target is an error, not a wild read. While
//    a step is being recorded (CUDA graph) nothing comes back: the kernels
//    run on the device's own count, counted_tokens is -1, and a bad target
//    is not caught (it was checked by the eager warm-up steps' data path).
//  - `combine` (vocabulary parallelism) gets DEVICE pointers to the chunk's
//    per-row lse and target logits (tc floats each), valid on
//    current_stream(): it must order its work on that stream (e.g. enqueue
//    an all-reduce on it), since everything after it is queued there too.
//  - Row losses land in a device array of N floats, summed at the end by one
//    block in double, in an order fixed by the block shape.
//  - Extra memory: the CPU kernel's tiles, plus 12*N bytes (targets as
//    columns, row losses) and 16*tc of row state; cuBLASLt's workspace is the
//    GEMM's own, allocated once.
//
// Per row, in f32 (the CPU kernel's formulas): z = cap * tanh(x / cap) when
// softcap > 0 (else z = x), lse = max + log(sum exp(z - max)),
// loss = lse - z[target] + z_loss * lse^2, and
//   d(loss)/dx_j = (softmax_j * (1 + 2 z_loss lse) - [j == target]) * scale * (1 - (z_j / cap)^2).
// expf, logf and tanhf are the accurate library versions: the fast intrinsics
// lose up to ~1e-5 relative at the exponents a softmax meets, which the f32
// comparison with the CPU backend would see.
#include <cuda_bf16.h>

#include <cstdint>

#include "titan/ops/cross_entropy.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/fused_cross_entropy_tiles.h"

namespace titan::ops::cuda {
namespace {

// A row's target as a column of this weight's rows, or one of these.
constexpr int64_t kFusedCeIgnored = -1;    // the target is ignore_index
constexpr int64_t kFusedCeElsewhere = -2;  // counted, but in another vocabulary shard

// Per row of the current token chunk (f32 device arrays).
struct FusedCeRows {
  float* running_max = nullptr;
  float* running_sum = nullptr;  // of exp(z - running_max)
  float* target_logit = nullptr;
  float* lse = nullptr;
};

// One tile: rows x cols f32 logits, `stride` apart, for vocabulary columns
// [col_offset, col_offset + cols) of this weight.
struct FusedCeTile {
  float* logits = nullptr;
  int64_t stride = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t col_offset = 0;
  const int64_t* columns = nullptr;  // the tile's rows' targets (launch_fused_ce_targets), already offset
  float softcap = 0.0f;
  float z_loss = 0.0f;
  const float* scale = nullptr;  // device: d(loss)/d(row loss)
  // The gradient tile (same stride): f32 (may be `logits` itself) or bf16; null for none.
  void* grad = nullptr;
  bool grad_bf16 = false;
};

constexpr int kTargetThreads = 1024;
constexpr int kLossThreads = 1024;
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

// Reads targets (i32 or i64) into columns[rows] and writes summary[0] = the
// counted rows, summary[1] = the first row whose target is neither
// ignore_index nor in [0, vocab) (rows when there is none), and scale[0] =
// d(loss)/d(row loss) (1 / counted for a mean, 0 when nothing counts). This
// weight holds the vocabulary rows [offset, offset + local). Everything stays
// on the device: a recorded step reads none of it on the host.
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

// Caps the tile's logits in place and folds them into each row's running
// max, sum and target logit (first: start from nothing). last: also finishes
// lse; then with row_loss non-null writes each row's loss there (0 for an
// ignored row), and with tile.grad non-null turns the row into its gradient.
cudaError_t launch_fused_ce_reduce_tile(const FusedCeTile& tile, const FusedCeRows& state, bool first, bool last,
                                        float* row_loss, cudaStream_t stream) {
  if (tile.rows == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(tile.rows);
  const int threads = threads_for(tile.cols);  // whole warps, 32 to 256
  if (tile.grad_bf16 && tile.grad != nullptr) {
    reduce_tile<<<grid, threads, 0, stream>>>(tile, state, first, last, row_loss,
                                              static_cast<__nv_bfloat16*>(tile.grad));
  } else {
    reduce_tile<<<grid, threads, 0, stream>>>(tile, state, first, last, row_loss, static_cast<float*>(tile.grad));
  }
  return cudaGetLastError();
}

// Writes the gradient of a tile from the finished lse; capped says the tile
// already holds capped logits (else they are capped on the way).
cudaError_t launch_fused_ce_gradient_tile(const FusedCeTile& tile, const FusedCeRows& state, bool capped,
                                          cudaStream_t stream) {
  if (tile.rows == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(tile.rows);
  const int threads = threads_for(tile.cols);  // whole warps, 32 to 256
  if (tile.grad_bf16) {
    gradient_tile<<<grid, threads, 0, stream>>>(tile, state, capped, static_cast<__nv_bfloat16*>(tile.grad));
  } else {
    gradient_tile<<<grid, threads, 0, stream>>>(tile, state, capped, static_cast<float*>(tile.grad));
  }
  return cudaGetLastError();
}

// row_loss[r] = lse - target_logit + z_loss * lse^2 for counted rows, 0 for ignored ones.
cudaError_t launch_fused_ce_row_losses(float* row_loss, const int64_t* columns, const FusedCeRows& state, int64_t rows,
                                       float z_loss, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  row_losses<<<grid_for(rows, kElementThreads), kElementThreads, 0, stream>>>(row_loss, columns, state, rows, z_loss);
  return cudaGetLastError();
}

// loss[0] = the sum of row_loss[0, rows) (in double, fixed order), divided by
// *counted (device) when mean; 0 when nothing counts.
cudaError_t launch_fused_ce_total_loss(float* loss, const float* row_loss, int64_t rows, const int64_t* counted,
                                       bool mean, cudaStream_t stream) {
  total_loss<<<1, kLossThreads, 0, stream>>>(loss, row_loss, rows, counted, mean);
  return cudaGetLastError();
}

// The device's row work on the tiles of the fused op (the tile loop, its
// GEMMs and buffers are FusedCrossEntropyTiles', shared with the CPU): the
// row kernels above, on the current stream.
class CudaFusedCrossEntropy final : public FusedCrossEntropyTiles {
 public:
  CudaFusedCrossEntropy(FusedCrossEntropyOutput& result, const Tensor& hidden, const Tensor& weight,
                        const Tensor& columns, const Tensor& summary, const Tensor& scale,
                        const FusedCrossEntropyOptions& options)
      : FusedCrossEntropyTiles(result, hidden, weight, options),
        columns_(columns.data<int64_t>()),
        counted_(summary.data<int64_t>()),
        scale_(scale.data<float>()),
        stream_(current_stream()) {
    const Device device = hidden.device();
    row_state_ = Tensor::empty({4, token_chunk_}, DType::f32, device);
    row_loss_ = Tensor::empty({rows_}, DType::f32, device);
    float* state = row_state_.data<float>();
    rows_state_ = {state, state + token_chunk_, state + 2 * token_chunk_, state + 3 * token_chunk_};
  }

 private:
  FusedCeTile tile_args(const Tile& rows) const {
    FusedCeTile tile;
    tile.logits = logits_.data<float>();
    tile.stride = vocab_chunk_;
    tile.rows = rows.tc;
    tile.cols = rows.vc;
    tile.col_offset = rows.v0;
    tile.columns = columns_ + rows.t0;
    tile.softcap = options_.softcap;
    tile.z_loss = options_.z_loss;
    tile.scale = scale_;
    if (grads_) {
      tile.grad = bf16_ ? grad_tile_.data_ptr() : logits_.data_ptr();
      tile.grad_bf16 = bf16_;
    }
    return tile;
  }

  // Without a combine step, the last tile also writes each row's loss.
  void reduce_rows(const Tile& rows, bool first, bool last, bool gradient) override {
    FusedCeTile tile = tile_args(rows);
    if (!gradient) tile.grad = nullptr;
    float* row_loss = combine_ ? nullptr : row_loss_.data<float>() + rows.t0;
    TITAN_CUDA_CHECK(launch_fused_ce_reduce_tile(tile, rows_state_, first, last, row_loss, stream_));
  }

  float* lse_rows() override { return rows_state_.lse; }
  float* target_logit_rows() override { return rows_state_.target_logit; }

  // With a combine step the rows' losses wait for the combined lse.
  void finish_rows(int64_t t0, int64_t tc) override {
    if (!combine_) return;
    TITAN_CUDA_CHECK(launch_fused_ce_row_losses(row_loss_.data<float>() + t0, columns_ + t0, rows_state_, tc,
                                                options_.z_loss, stream_));
  }

  void gradient_rows(const Tile& rows, bool capped) override {
    TITAN_CUDA_CHECK(launch_fused_ce_gradient_tile(tile_args(rows), rows_state_, capped, stream_));
  }

  void finish_loss() override {
    TITAN_CUDA_CHECK(launch_fused_ce_total_loss(result_.loss.data<float>(), row_loss_.data<float>(), rows_, counted_,
                                                options_.mean, stream_));
  }

  const int64_t* columns_;  // device: each row's target column (launch_fused_ce_targets)
  const int64_t* counted_;  // device: rows counted
  const float* scale_;      // device: d(loss)/d(row loss) for a unit loss gradient
  const cudaStream_t stream_;
  Tensor row_state_;  // [4, tc] f32: running max, running sum, target logit, lse
  Tensor row_loss_;   // [N] f32: each row's loss (0 when ignored)
  FusedCeRows rows_state_;
};

// Each row's target column (i64), the summary [counted, first bad row] (i64)
// and the gradient scale (f32), all on the device.
struct TargetInfo {
  Tensor columns, summary, scale;
  int64_t counted = -1;  // on the host; -1 while recording a step (not read back)
};

bool recording(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TITAN_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status == cudaStreamCaptureStatusActive;
}

// Checks and counts the targets on the device; eagerly, one synchronisation
// brings the count home and turns a bad target into an error.
TargetInfo read_targets(const Tensor& targets, int64_t vocab, const FusedCrossEntropyOptions& options, int64_t local) {
  const char* op = "fused_linear_cross_entropy";
  const int64_t rows = targets.size(0);
  const cudaStream_t stream = current_stream();
  TargetInfo info{Tensor::empty({rows}, DType::i64, targets.device()), Tensor::empty({2}, DType::i64, targets.device()),
                  Tensor::empty({1}, DType::f32, targets.device())};
  TITAN_CUDA_CHECK(launch_fused_ce_targets(info.columns.data<int64_t>(), info.summary.data<int64_t>(),
                                           info.scale.data<float>(), options.loss.mean, targets.data_ptr(),
                                           targets.dtype() == DType::i64, rows, vocab, options.loss.ignore_index,
                                           options.vocab_offset, local, stream));
  if (recording(stream)) return info;
  int64_t host[2] = {0, 0};
  TITAN_CUDA_CHECK(cudaMemcpyAsync(host, info.summary.data_ptr(), sizeof(host), cudaMemcpyDeviceToHost, stream));
  TITAN_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int64_t bad_row = host[1];
  if (bad_row < rows) {
    // The error path may synchronise again: fetch the offending value for the message.
    int64_t wide = 0;
    int32_t narrow = 0;
    const bool i64 = targets.dtype() == DType::i64;
    TITAN_CUDA_CHECK(cudaMemcpyAsync(i64 ? static_cast<void*>(&wide) : static_cast<void*>(&narrow),
                                     static_cast<const char*>(targets.data_ptr()) + bad_row * targets.element_size(),
                                     targets.element_size(), cudaMemcpyDeviceToHost, stream));
    TITAN_CUDA_CHECK(cudaStreamSynchronize(stream));
    const int64_t value = i64 ? wide : narrow;
    fail("{}: target {} at row {} is outside the vocabulary [0, {}) and is not ignore_index ({})", op, value, bad_row,
         vocab, options.loss.ignore_index);
  }
  info.counted = host[0];
  return info;
}

void fused_cross_entropy_kernel(FusedCrossEntropyOutput& result, const Tensor& hidden, const Tensor& weight,
                                const Tensor& targets, const FusedCrossEntropyOptions& options) {
  const int64_t vocab = fused_cross_entropy_vocab(weight, options);
  const TargetInfo info = read_targets(targets, vocab, options, weight.size(0));
  result.counted_tokens = info.counted;
  const cudaStream_t stream = current_stream();
  if (info.counted == 0) {
    // Nothing counted: the loss is defined as 0 and every gradient as 0 (not
    // 0/0); all-zero bits are 0.0 in f32 and bf16 alike. (A recorded step
    // takes the full path, whose scale of 0 gives the same zeros.)
    auto zero = [stream](const Tensor& t) {
      if (t.nbytes() > 0) TITAN_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), stream));
    };
    zero(result.loss);
    if (options.compute_grads) {
      zero(result.grad_hidden);
      zero(result.grad_weight);
    }
    return;
  }
  // Counted rows with an empty shard: every target lies elsewhere, and there
  // is no logit here to take an lse over.
  TITAN_CHECK(weight.size(0) > 0, "fused_linear_cross_entropy: the weight holds no vocabulary rows");
  if (hidden.dtype() != DType::f32 && hidden.dtype() != DType::bf16) {
    unsupported_dtype("fused_linear_cross_entropy", hidden.device(), hidden.dtype());
  }
  CudaFusedCrossEntropy(result, hidden, weight, info.columns, info.summary, info.scale, options).run();
}

}  // namespace

void register_fused_cross_entropy() {
  fused_cross_entropy_kernels.set_kernel(DeviceType::cuda, fused_cross_entropy_kernel);
}

}  // namespace titan::ops::cuda
