// CUDA grouped GEMM of a mixture-of-experts layer (see ops/grouped_gemm.h):
// every expert's product in one launch, without the host ever seeing the row
// counts, so a step through this op can be recorded into a graph. The check
// the CPU kernel makes (counts adding up to the rows) cannot be made without
// waiting for the device, and is not; the kernels clamp bad counts instead of
// reading or writing out of bounds.
//
// A first one-block kernel turns counts into each expert's first row and
// first row tile (prefix sums). The row-wise products then launch a grid of
// ceil(N / 64) + E row tiles, an upper bound on sum_e ceil(count_e / 64) that
// needs no counts; each block finds its expert by binary search in the tile
// offsets, and blocks past the last tile exit. The weight gradient launches
// one block per (expert, 64x64 tile of the weight) and sums the expert's rows
// in order; an expert with no rows writes zeros.
//
// The tile product is a plain shared-memory SIMT kernel: 64x64 outputs per
// block of 256 threads, 4x4 per thread, 16-deep slices of the reduction
// staged as f32 (bf16 widened on load, exactly). Every output is one f32
// accumulation in a fixed order, so results are identical run to run. It is
// correct first; tensor cores (bf16 MMA) are the next step for speed.
#include <cub/cub.cuh>

#include <cstdint>
#include <limits>

#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/grouped_gemm.h"

namespace titan::ops::cuda {
namespace {

// N rows in expert order, E experts, weights [E, out, in]:
//  forward:     out [N, out] = a [N, in] @ b[e]^T     (a = x, b = w)
//  input_grad:  out [N, in]  = a [N, out] @ b[e]      (a = grad_y, b = w)
//  weight_grad: out [E, out, in], out[e] = a_e^T @ b_e (a = grad_y [N, out], b = x [N, in]),
//               zero for an expert with no rows
enum class GroupedProduct { forward, input_grad, weight_grad };

// Device workspace launch_grouped_gemm needs, in int64 words.
inline int64_t grouped_gemm_workspace_words(int64_t experts) { return 2 * (experts + 1); }

// Largest grid dimension the launcher uses for column tiles and experts
// (grid.y and grid.z); the caller checks sizes against it.
constexpr int64_t kGroupedGemmMaxGridYZ = 65535;
// Rows and columns of one output tile.
constexpr int64_t kGroupedGemmTile = 64;

constexpr int kGemmThreads = 256;
constexpr int kTile = static_cast<int>(kGroupedGemmTile);
constexpr int kTileK = 16;     // depth of one staged slice of the reduction
constexpr int kSide = 16;      // threads along each side of the block: 16 x 16
constexpr int kPerThread = 4;  // outputs per thread along each side: kSide * kPerThread = kTile
static_assert(kSide * kSide == kGemmThreads && kSide * kPerThread == kTile);

// row_offsets[e] = expert e's first row, tile_offsets[e] = its first row tile
// (E + 1 entries each, the last being the totals). Counts are clamped so the
// rows never pass N. One block scans the experts in chunks of kGemmThreads.
__global__ void __launch_bounds__(kGemmThreads)
    expert_offsets(const int64_t* counts, int64_t experts, int64_t rows, int64_t* row_offsets, int64_t* tile_offsets) {
  using Scan = cub::BlockScan<int64_t, kGemmThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  int64_t rows_before = 0, tiles_before = 0;  // the chunks so far; the same in every thread
  for (int64_t first = 0; first < experts; first += kGemmThreads) {
    const int64_t e = first + threadIdx.x;
    int64_t count = e < experts ? counts[e] : 0;
    count = count < 0 ? 0 : (count > rows ? rows : count);
    int64_t start = 0, chunk_rows = 0;
    Scan(scan_storage).ExclusiveSum(count, start, chunk_rows);
    __syncthreads();  // scan_storage is reused just below
    const int64_t begin = min(rows_before + start, rows), end = min(rows_before + start + count, rows);
    const int64_t tiles = (end - begin + kTile - 1) / kTile;
    int64_t tile_start = 0, chunk_tiles = 0;
    Scan(scan_storage).ExclusiveSum(tiles, tile_start, chunk_tiles);
    __syncthreads();
    if (e < experts) {
      row_offsets[e] = begin;
      tile_offsets[e] = tiles_before + tile_start;
    }
    rows_before += chunk_rows;
    tiles_before += chunk_tiles;
  }
  if (threadIdx.x == 0) {
    row_offsets[experts] = min(rows_before, rows);
    tile_offsets[experts] = tiles_before;
  }
}

// The expert whose tiles hold `tile` (< tile_offsets[experts]): the last e
// with tile_offsets[e] <= tile, which skips experts with no tiles.
__device__ __forceinline__ int64_t expert_of_tile(const int64_t* tile_offsets, int64_t experts, int64_t tile) {
  int64_t lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (tile_offsets[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// acc[i][j] = sum over k < k_size of A(m, k) B(k, n) for m = m0 + ty + 16 i,
// n = n0 + tx + 16 j (zero outside m_size x n_size). kAUnitK: A(m, k) =
// a[m * lda + k], else a[k * lda + m]; kBUnitK: B(k, n) = b[n * ldb + k], else
// b[k * ldb + n]. Each tile is loaded with consecutive threads on the operand's
// contiguous index, so global reads coalesce; the +1 column of padding keeps
// the shared-memory stores of the transposing loads off a single bank.
template <typename T, bool kAUnitK, bool kBUnitK>
__device__ __forceinline__ void multiply_tile(float (&acc)[kPerThread][kPerThread], const T* a, int64_t lda, const T* b,
                                              int64_t ldb, int64_t m0, int64_t n0, int64_t m_size, int64_t n_size,
                                              int64_t k_size) {
  __shared__ float a_tile[kTileK][kTile + 1];
  __shared__ float b_tile[kTileK][kTile + 1];
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  for (int64_t k0 = 0; k0 < k_size; k0 += kTileK) {
    for (int i = threadIdx.x; i < kTile * kTileK; i += kGemmThreads) {
      const int m = kAUnitK ? i / kTileK : i % kTile, kk = kAUnitK ? i % kTileK : i / kTile;
      const int64_t gm = m0 + m, gk = k0 + kk;
      a_tile[kk][m] = gm < m_size && gk < k_size ? load_f32(a, kAUnitK ? gm * lda + gk : gk * lda + gm) : 0.0f;
    }
    for (int i = threadIdx.x; i < kTile * kTileK; i += kGemmThreads) {
      const int n = kBUnitK ? i / kTileK : i % kTile, kk = kBUnitK ? i % kTileK : i / kTile;
      const int64_t gn = n0 + n, gk = k0 + kk;
      b_tile[kk][n] = gn < n_size && gk < k_size ? load_f32(b, kBUnitK ? gn * ldb + gk : gk * ldb + gn) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float a_values[kPerThread], b_values[kPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) a_values[i] = a_tile[kk][ty + kSide * i];
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) b_values[j] = b_tile[kk][tx + kSide * j];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) acc[i][j] = fmaf(a_values[i], b_values[j], acc[i][j]);
      }
    }
    __syncthreads();  // the next slice overwrites the tiles
  }
}

template <typename T>
__device__ __forceinline__ void store_tile(T* out, int64_t ldc, const float (&acc)[kPerThread][kPerThread], int64_t m0,
                                           int64_t n0, int64_t m_size, int64_t n_size) {
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int64_t m = m0 + ty + kSide * i;
    if (m >= m_size) continue;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int64_t n = n0 + tx + kSide * j;
      if (n < n_size) store_f32(out, m * ldc + n, acc[i][j]);
    }
  }
}

// forward (kBUnitK, B(k, n) = w[e][n, k]) and input_grad (B(k, n) = w[e][k, n]):
// block x is a row tile of some expert, block y a tile of output columns.
template <typename T, bool kBUnitK>
__global__ void __launch_bounds__(kGemmThreads)
    grouped_rows_product(T* out, const T* a, const T* w, const int64_t* row_offsets, const int64_t* tile_offsets,
                         int64_t experts, int64_t a_cols, int64_t out_cols, int64_t w_cols, int64_t w_expert_stride) {
  const int64_t tile = blockIdx.x;
  if (tile >= tile_offsets[experts]) return;  // past the last expert's tiles: the grid is an upper bound
  const int64_t e = expert_of_tile(tile_offsets, experts, tile);
  const int64_t begin = row_offsets[e], count = row_offsets[e + 1] - begin;
  const int64_t m0 = (tile - tile_offsets[e]) * kTile, n0 = static_cast<int64_t>(blockIdx.y) * kTile;
  float acc[kPerThread][kPerThread] = {};
  multiply_tile<T, true, kBUnitK>(acc, a + begin * a_cols, a_cols, w + e * w_expert_stride, w_cols, m0, n0, count,
                                  out_cols, a_cols);
  store_tile(out + begin * out_cols, out_cols, acc, m0, n0, count, out_cols);
}

// grad_w[e] = grad_y_e^T @ x_e: block (x, y, z) = (input tile, output tile, expert).
template <typename T>
__global__ void __launch_bounds__(kGemmThreads)
    grouped_weight_grad(T* grad_w, const T* grad_y, const T* x, const int64_t* row_offsets, int64_t out_features,
                        int64_t in_features) {
  const int64_t e = blockIdx.z;
  const int64_t begin = row_offsets[e], count = row_offsets[e + 1] - begin;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile, n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  float acc[kPerThread][kPerThread] = {};
  // A(m, k) = grad_y[begin + k, m], B(k, n) = x[begin + k, n]; no rows: the zeros stay.
  multiply_tile<T, false, false>(acc, grad_y + begin * out_features, out_features, x + begin * in_features, in_features,
                                 m0, n0, out_features, in_features, count);
  store_tile(grad_w + e * out_features * in_features, in_features, acc, m0, n0, out_features, in_features);
}

unsigned int tiles_of(int64_t n) { return static_cast<unsigned int>((n + kTile - 1) / kTile); }

template <typename T>
void launch_typed(GroupedProduct kind, T* out, const T* a, const T* b, const int64_t* row_offsets,
                  const int64_t* tile_offsets, int64_t experts, int64_t rows, int64_t out_features, int64_t in_features,
                  cudaStream_t stream) {
  if (kind == GroupedProduct::weight_grad) {
    const dim3 grid(tiles_of(in_features), tiles_of(out_features), static_cast<unsigned int>(experts));
    grouped_weight_grad<<<grid, kGemmThreads, 0, stream>>>(out, a, b, row_offsets, out_features, in_features);
    return;
  }
  const auto row_tiles = static_cast<unsigned int>((rows + kTile - 1) / kTile + experts);
  if (kind == GroupedProduct::forward) {  // a [N, in], out [N, out]
    grouped_rows_product<T, true><<<dim3(row_tiles, tiles_of(out_features)), kGemmThreads, 0, stream>>>(
        out, a, b, row_offsets, tile_offsets, experts, in_features, out_features, in_features,
        out_features * in_features);
  } else {  // a [N, out], out [N, in]
    grouped_rows_product<T, false><<<dim3(row_tiles, tiles_of(in_features)), kGemmThreads, 0, stream>>>(
        out, a, b, row_offsets, tile_offsets, experts, out_features, in_features, in_features,
        out_features * in_features);
  }
}

// Operands f32 or bf16 (both the same), f32 accumulation, one rounding on
// store. counts [E] i64 on the device; a count below 0 counts as 0, and counts
// adding up to more than N are cut at N (rows past N never exist); rows past
// the counts' sum are left unwritten (the CPU kernel refuses such counts).
cudaError_t launch_grouped_gemm(GroupedProduct kind, bool bf16, void* out, const void* a, const void* b,
                                const int64_t* counts, int64_t experts, int64_t rows, int64_t out_features,
                                int64_t in_features, int64_t* workspace, cudaStream_t stream) {
  // No expert, or an output with no columns: nothing to write. (A zero-length
  // reduction is not skipped: its outputs are zeros.)
  const int64_t out_cols = kind == GroupedProduct::forward ? out_features : in_features;
  if (experts == 0 || out_cols == 0 || (kind == GroupedProduct::weight_grad && out_features == 0)) return cudaSuccess;
  int64_t* row_offsets = workspace;
  int64_t* tile_offsets = workspace + experts + 1;
  expert_offsets<<<1, kGemmThreads, 0, stream>>>(counts, experts, rows, row_offsets, tile_offsets);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  if (bf16) {
    launch_typed(kind, static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(a),
                 static_cast<const __nv_bfloat16*>(b), row_offsets, tile_offsets, experts, rows, out_features,
                 in_features, stream);
  } else {
    launch_typed(kind, static_cast<float*>(out), static_cast<const float*>(a), static_cast<const float*>(b),
                 row_offsets, tile_offsets, experts, rows, out_features, in_features, stream);
  }
  return cudaGetLastError();
}

GroupedProduct product_of(GroupedGemmKind kind) {
  switch (kind) {
    case GroupedGemmKind::forward:
      return GroupedProduct::forward;
    case GroupedGemmKind::input_grad:
      return GroupedProduct::input_grad;
    case GroupedGemmKind::weight_grad:
      return GroupedProduct::weight_grad;
  }
  fail("grouped_gemm: unknown product kind {}", static_cast<int>(kind));
}

void grouped_gemm_kernel(GroupedGemmKind kind, const Tensor& out, const Tensor& a, const Tensor& b,
                         const Tensor& counts) {
  if (a.dtype() != DType::f32 && a.dtype() != DType::bf16) unsupported_dtype("grouped_gemm", a.device(), a.dtype());
  TITAN_CHECK(b.dtype() == a.dtype(), "grouped_gemm on {}: operands are {} and {}", a.device().str(),
              dtype_name(a.dtype()), dtype_name(b.dtype()));
  TITAN_CHECK(counts.device() == a.device(), "grouped_gemm: counts on {} but rows on {} (the kernel reads them there)",
              counts.device().str(), a.device().str());
  const GroupedProduct product = product_of(kind);
  const bool weight_grad = product == GroupedProduct::weight_grad;
  const int64_t experts = counts.numel(), rows = a.size(0);
  // forward / input_grad: w = b [E, out, in]; weight_grad: grad_w = out [E, out, in].
  const Tensor& weight = weight_grad ? out : b;
  const int64_t out_features = weight.size(1), in_features = weight.size(2);
  const int64_t tile = kGroupedGemmTile;
  const int64_t column_tiles = ((product == GroupedProduct::forward ? out_features : in_features) + tile - 1) / tile;
  if (weight_grad) {
    TITAN_CHECK(experts <= kGroupedGemmMaxGridYZ && (out_features + tile - 1) / tile <= kGroupedGemmMaxGridYZ &&
                    column_tiles <= std::numeric_limits<int32_t>::max(),
                "grouped_gemm on {}: {} experts of [{}, {}] weights exceed the launch grid", a.device().str(), experts,
                out_features, in_features);
  } else {
    TITAN_CHECK(column_tiles <= kGroupedGemmMaxGridYZ &&
                    (rows + tile - 1) / tile + experts <= std::numeric_limits<int32_t>::max(),
                "grouped_gemm on {}: {} rows of {} experts of [{}, {}] weights exceed the launch grid",
                a.device().str(), rows, experts, out_features, in_features);
  }
  const Tensor workspace = Tensor::empty({grouped_gemm_workspace_words(experts)}, DType::i64, a.device());
  TITAN_CUDA_CHECK(launch_grouped_gemm(product, a.dtype() == DType::bf16, out.data_ptr(), a.data_ptr(), b.data_ptr(),
                                       counts.data<int64_t>(), experts, rows, out_features, in_features,
                                       workspace.data<int64_t>(), current_stream()));
}

}  // namespace

void register_grouped_gemm() { grouped_gemm_kernels.set_kernel(DeviceType::cuda, grouped_gemm_kernel); }

}  // namespace titan::ops::cuda
