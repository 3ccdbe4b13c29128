// Device code shared by the flash attention kernels on CUDA cores (attention.cu
// and attention_backward.cu): the block's thread layout, the mask at
// element and tile granularity, and the shared-memory tile products.
//
// Every kernel works on 64 x 64 tiles of scores with 256 threads. Thread
// (ty, tx) = (tid / 16, tid % 16) owns the 4 x 4 scores at rows ty + 16 i and
// columns tx + 16 j (i, j < 4), and of a [64, D] accumulator the rows
// ty + 16 i and columns tx + 16 j (j < D / 16). Strided rather than blocked
// ownership keeps shared-memory reads free of bank conflicts: a half warp
// (one ty) reads one row element (a broadcast) and 16 different rows of the
// other operand, whose stride D + 1 puts them in 16 different banks. The 16
// threads of one row are one half warp, so row reductions are 4 shuffles.
//
// The products are scalar f32 FMAs from shared memory, accumulating in
// registers: simple and clearly right, and the path for f32 and for head dims
// other than 64 and 128. bf16 with D = 64 or 128 (the common models) runs the
// tensor-core kernels of attention_tensor_core.cuh instead.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "titan/ops/cuda/attention.cuh"
#include "titan/ops/cuda/device_math.cuh"

namespace titan::ops::cuda::attention {

inline constexpr int kTile = kAttentionTile;
inline constexpr int kThreads = 256;
inline constexpr int kSide = 16;              // threads along each side of a tile
inline constexpr int kMicro = kTile / kSide;  // rows (and score columns) per thread
// Row stride of a [64, 64] score tile in shared memory: 16 mod 32 banks puts
// the two half warps of a warp, which write rows ty and ty + 1, in disjoint banks.
inline constexpr int kScoreStride = kTile + 16;

// Row stride of a [64, D] f32 tile in shared memory (see the bank note above).
__host__ __device__ inline int tile_stride(int dim) { return dim + 1; }
__host__ __device__ inline int tiles(int length) { return (length + kTile - 1) / kTile; }

__device__ __forceinline__ bool has_documents(const AttentionProblem& p) {
  return p.doc32 != nullptr || p.doc64 != nullptr;
}

// Document ids of positions [first, first + valid) of batch row b into
// ids[0, kTile); without document ids (and past `valid`) every id is 0, so the
// mask test compares equal ids and needs no branch.
__device__ __forceinline__ void load_documents(const AttentionProblem& p, int64_t b, int first, int valid,
                                               int64_t* ids) {
  const int t = static_cast<int>(threadIdx.x);
  if (t < kTile) {
    int64_t id = 0;
    if (t < valid && has_documents(p)) {
      const int64_t index = b * p.k_len + first + t;
      id = p.doc32 != nullptr ? static_cast<int64_t>(p.doc32[index]) : p.doc64[index];
    }
    ids[t] = id;
  }
}

// Document ids of queries [q0, q0 + valid) of batch row b into ids[0, kTile):
// their own ids when the problem has them, else the keys' at their positions.
__device__ __forceinline__ void load_query_documents(const AttentionProblem& p, int64_t b, int q0, int valid,
                                                     int64_t* ids) {
  if (p.q_doc32 == nullptr && p.q_doc64 == nullptr) {
    load_documents(p, b, p.q_offset + q0, valid, ids);
    return;
  }
  const int t = static_cast<int>(threadIdx.x);
  if (t < kTile) {
    int64_t id = 0;
    if (t < valid) {
      const int64_t index = b * p.q_len + q0 + t;
      id = p.q_doc32 != nullptr ? static_cast<int64_t>(p.q_doc32[index]) : p.q_doc64[index];
    }
    ids[t] = id;
  }
}

// ops/attention.h: key `key` is visible from the query at absolute position `query`.
__device__ __forceinline__ bool visible(const AttentionProblem& p, int query, int key, int64_t query_doc,
                                        int64_t key_doc) {
  return (!p.causal || key <= query) && (p.window == 0 || query - key < p.window) && query_doc == key_doc;
}

// The visibility of this thread's 4 x 4 scores, bit 4 i + j for row ty + 16 i
// and column tx + 16 j. Rows are queries (forward, dQ) or keys (dK/dV, which
// work on transposed tiles). Out-of-range rows and columns are hidden.
template <bool kRowsAreQueries>
__device__ __forceinline__ uint32_t visible_bits(const AttentionProblem& p, int first_query, int q_rows,
                                                 const int64_t* q_docs, int first_key, int k_rows,
                                                 const int64_t* k_docs, int ty, int tx) {
  uint32_t bits = 0;
#pragma unroll
  for (int i = 0; i < kMicro; ++i) {
#pragma unroll
    for (int j = 0; j < kMicro; ++j) {
      const int row = ty + kSide * i, col = tx + kSide * j;
      const int qi = kRowsAreQueries ? row : col, ki = kRowsAreQueries ? col : row;
      const bool shown =
          qi < q_rows && ki < k_rows && visible(p, first_query + qi, first_key + ki, q_docs[qi], k_docs[ki]);
      bits |= static_cast<uint32_t>(shown) << (kMicro * i + j);
    }
  }
  return bits;
}

__device__ __forceinline__ bool bit(uint32_t bits, int i, int j) { return ((bits >> (kMicro * i + j)) & 1u) != 0; }

// The logit soft cap (AttentionProblem::softcap > 0) of a scaled score s:
// z = cap * tanh(s / cap), with the accurate tanhf. Its slope dz/ds, which
// the backward multiplies into dS, is 1 - (z / cap)^2; clamped, so rounding
// that puts |z| a hair above cap cannot make it negative.
__device__ __forceinline__ float soft_capped(float score, float cap) { return cap * tanhf(score / cap); }
__device__ __forceinline__ float soft_cap_slope(float capped, float cap) {
  const float t = fminf(fabsf(capped / cap), 1.0f);
  return 1.0f - t * t;
}

// Tiles a block may need, [first, end): the mask's causal and window bounds on
// whole tiles (the same bounds as the CPU kernel's, at 64-row tiles). Tiles
// inside the range can still be wholly hidden (documents); the kernels find
// those with one vote per tile.
struct TileRange {
  int first, end;
};

// Key tiles that can hold a key visible from query rows [q0, q0 + q_rows)
// (queries placed by the mask may lie before or after every key).
__device__ __forceinline__ TileRange key_tiles(const AttentionProblem& p, int q0, int q_rows) {
  const int first_query = p.q_offset + q0, last_query = first_query + q_rows - 1;
  const int first = p.window > 0 ? min(tiles(p.k_len), max(0, first_query - p.window + 1) / kTile) : 0;
  const int end = p.causal ? (last_query < 0 ? 0 : min(tiles(p.k_len), last_query / kTile + 1)) : tiles(p.k_len);
  return {min(first, end), end};
}

// Query tiles that can see a key of rows [k0, k0 + k_rows).
__device__ __forceinline__ TileRange query_tiles(const AttentionProblem& p, int k0, int k_rows) {
  const int offset = p.q_offset;  // query i sits at position offset + i
  int end = tiles(p.q_len);
  if (p.window > 0) {
    const int last_query = k0 + k_rows - 1 + p.window - 1 - offset;  // the latest query still in reach
    end = last_query < 0 ? 0 : min(end, last_query / kTile + 1);
  }
  const int first = p.causal ? min(tiles(p.q_len), max(0, k0 - offset) / kTile) : 0;
  return {min(first, end), end};
}

// Rows [0, rows) of one head's [rows, dim] slice (rows `row_stride` elements
// apart) into an f32 tile with row stride `ld`. Rows from `rows` to kTile are
// zeroed: a masked score is 0 after the softmax, and 0 times stale shared
// memory could be NaN.
template <typename T>
__device__ __forceinline__ void load_tile(const T* src, int64_t row_stride, int rows, int dim, float* tile, int ld) {
  for (int e = static_cast<int>(threadIdx.x); e < kTile * dim; e += kThreads) {
    const int r = e / dim, d = e - r * dim;
    tile[r * ld + d] = r < rows ? load_f32(src, r * row_stride + d) : 0.0f;
  }
}

// acc[i][j] += a[ty + 16 i, :] . b[tx + 16 j, :] over the first `dim` columns.
__device__ __forceinline__ void tile_dot(const float* a, const float* b, int ld, int dim, int ty, int tx,
                                         float (&acc)[kMicro][kMicro]) {
  const float* a_rows = a + ty * ld;
  const float* b_rows = b + tx * ld;
#pragma unroll 4
  for (int d = 0; d < dim; ++d) {
    float x[kMicro], y[kMicro];
#pragma unroll
    for (int i = 0; i < kMicro; ++i) {
      x[i] = a_rows[kSide * i * ld + d];
      y[i] = b_rows[kSide * i * ld + d];
    }
#pragma unroll
    for (int i = 0; i < kMicro; ++i) {
#pragma unroll
      for (int j = 0; j < kMicro; ++j) acc[i][j] = fmaf(x[i], y[j], acc[i][j]);
    }
  }
}

// acc[i][j] += sum over c < kTile of scores[ty + 16 i, c] * tile[c, cols[j]]:
// a [64, 64] score tile times a [64, D] tile. cols[j] = min(tx + 16 j, D - 1),
// so columns past D read a valid element and are simply never stored.
template <int kCols>
__device__ __forceinline__ void tile_product(const float* scores, const float* tile, int ld, const int (&cols)[kCols],
                                             int ty, float (&acc)[kMicro][kCols]) {
  const float* score_rows = scores + ty * kScoreStride;
#pragma unroll 4
  for (int c = 0; c < kTile; ++c) {
    float s[kMicro];
#pragma unroll
    for (int i = 0; i < kMicro; ++i) s[i] = score_rows[kSide * i * kScoreStride + c];
    const float* row = tile + c * ld;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const float value = row[cols[j]];
#pragma unroll
      for (int i = 0; i < kMicro; ++i) acc[i][j] = fmaf(s[i], value, acc[i][j]);
    }
  }
}

// The accumulator columns a thread owns, clamped to the last real column.
template <int kCols>
__device__ __forceinline__ void owned_columns(int dim, int tx, int (&cols)[kCols]) {
#pragma unroll
  for (int j = 0; j < kCols; ++j) cols[j] = min(tx + kSide * j, dim - 1);
}

// Stores rows [0, rows) and columns [0, dim) of a thread's accumulator,
// times row_scale[i], rounding once to T.
template <typename T, int kCols>
__device__ __forceinline__ void store_rows(T* dst, int64_t row_stride, int rows, int dim, int ty, int tx,
                                           const float (&acc)[kMicro][kCols], const float (&row_scale)[kMicro]) {
#pragma unroll
  for (int i = 0; i < kMicro; ++i) {
    const int r = ty + kSide * i;
    if (r >= rows) continue;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int c = tx + kSide * j;
      if (c < dim) store_f32(dst, r * row_stride + c, acc[i][j] * row_scale[i]);
    }
  }
}

// Reductions over the 16 threads of one tile row (a half warp: tx is the low
// four lane bits). Every lane of the warp must call them.
__device__ __forceinline__ float row_group_max(float v) {
  for (int offset = kSide / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ float row_group_sum(float v) {
  for (int offset = kSide / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Calls f(T{}, MaxDim<kMaxD>{}) for the element type and the smallest
// compiled head-dim bound that holds `dim`: two bounds, not one per D, keep
// the instantiations (and nvcc's time) few, at the price of idle registers
// for D below the bound.
template <int kMaxD>
struct MaxDim {
  static constexpr int value = kMaxD;
};

template <typename F>
cudaError_t dispatch(AttentionElement element, int dim, F&& f) {
  if (dim < 1 || dim > kAttentionMaxHeadDim) return cudaErrorInvalidValue;
  const bool small = dim <= 64;
  if (element == AttentionElement::f32) return small ? f(float{}, MaxDim<64>{}) : f(float{}, MaxDim<128>{});
  return small ? f(__nv_bfloat16{}, MaxDim<64>{}) : f(__nv_bfloat16{}, MaxDim<128>{});
}

}  // namespace titan::ops::cuda::attention
