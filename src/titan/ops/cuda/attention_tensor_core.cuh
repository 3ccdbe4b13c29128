// Device code shared by the tensor-core flash attention kernels
// (attention_tensor_core_forward.cu, attention_tensor_core_backward.cu): bf16
// inputs, head dim D = 64 or 128, every matrix product on tensor cores through
// nvcuda::wmma (16 x 16 x 16 bf16 fragments, f32 accumulators).
//
// Layout. A block is 4 warps (128 threads) on a 64 x 64 tile of scores, the
// same 64-row tiles as the scalar kernels (attention_tile.cuh), so the tile
// ranges, grid shapes and length limits are shared. Warp w owns score rows
// 16 w .. 16 w + 15 and the matching rows of every accumulator, so a product
// writes rows no other warp reads: between a product and the elementwise work
// on its result only the warp has to agree (__syncwarp), and block barriers
// are needed only where a tile that every warp reads (K, V, Q, dO) is
// replaced.
//
// Fragments are opaque: their element layout is unspecified, so no code here
// touches fragment elements. A product's accumulator goes to shared memory
// (f32, the warp's own rows), the masking, softmax and rounding read it there
// with plain scalar code, and the result goes back into a product as a bf16
// tile in shared memory. For that elementwise work lane l of a warp takes row
// l / 2 of the warp's 16 and, of the 64 columns, 8 i + 4 (l % 2) + j for
// i < 8, j < 4: 16-byte reads of four columns, the two lanes of a row
// interleaved so that a quarter warp touches 8 distinct 16-byte bank groups,
// and a row's reductions are one shuffle (lane ^ 1).
//
// Shared-memory row strides are the width plus 8 elements (16 bytes): rows of
// a power-of-two width would all start in the same bank, and 16 bytes is what
// wmma and cp.async need for alignment. Every fragment starts at a multiple
// of 16 rows and 16 columns, hence 32-byte aligned as wmma requires.
//
// Global tiles come in with cp.async (sm_80+), so a kernel can ask for the
// next K or V tile while it still works on the current one.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "titan/ops/cuda/attention.cuh"
#include "titan/ops/cuda/attention_tile.cuh"

// wmma with bf16 needs sm_80. The build targets sm_80 and sm_90a; for an
// older architecture in a custom list the kernels compile to a trap, and the
// host never launches them there (see tensor_core_device()).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define TITAN_ATTENTION_TENSOR_CORES 1
#else
#define TITAN_ATTENTION_TENSOR_CORES 0
#endif

namespace titan::ops::cuda::attention::tensor_core {

using bf16 = __nv_bfloat16;

inline constexpr int kWarps = 4;
inline constexpr int kBlockThreads = kWarps * kWarpSize;
inline constexpr int kWarpRows = kTile / kWarps;  // 16: one fragment high
inline constexpr int kFragment = 16;
inline constexpr int kScoreFragments = kTile / kFragment;  // 4 fragments across a score row
// Row stride (elements) of a warp's [16, 64] f32 score rows and bf16 P / dS rows.
inline constexpr int kScoreLd = kTile + 8;
inline constexpr int kScoreBytes = kWarpRows * kScoreLd * 4;  // f32 scores of one warp
inline constexpr int kProbBytes = kWarpRows * kScoreLd * 2;   // bf16 P or dS of one warp
inline constexpr int kDocBytes = 2 * kTile * 8;               // query and key document ids
// Lazy rescaling (see the forward kernel): the running reference maximum is
// only raised when a score exceeds it by more than this (log2 units), so P <= 2^8.
inline constexpr float kRescaleThreshold = 8.0f;
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// Row stride (elements) of [rows, D] bf16 tiles and of [16, D] f32 staging.
template <int D>
inline constexpr int kLd = D + 8;

__host__ __device__ constexpr int max_of(int a, int b) { return a > b ? a : b; }

// The elementwise layout above: this lane's row within its warp's 16, and the
// first of its 4-column groups.
struct LaneSpot {
  int warp, lane, row, half;
};
__device__ __forceinline__ LaneSpot lane_spot() {
  const int t = static_cast<int>(threadIdx.x);
  return {t / kWarpSize, t % kWarpSize, (t % kWarpSize) / 2, t % 2};
}
__device__ __forceinline__ int spot_column(int half, int i, int j) { return 8 * i + 4 * half + j; }

// Copies rows [0, rows) of a [*, D] bf16 slice (rows `stride` elements apart)
// into a [kRows, kLd<D>] shared tile with cp.async; rows from `rows` to kRows
// are zeroed instead (a zero row times P = 0 stays 0, stale memory might be
// NaN). `lane` counts the kLanes threads that share the copy. The copies join
// the caller's next __pipeline_commit group; the zeros are plain stores.
template <int D, int kRows, int kLanes>
__device__ __forceinline__ void copy_rows_async(const bf16* src, int64_t stride, int rows, bf16* dst, int lane) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
#pragma unroll
  for (int c = lane; c < kRows * kChunks; c += kLanes) {
    const int r = c / kChunks, x = (c % kChunks) * 8;
    bf16* to = dst + r * kLd<D> + x;
    if (r < rows) {
      __pipeline_memcpy_async(to, src + r * stride + x, 16);
    } else {
      *reinterpret_cast<uint4*>(to) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// A tile wholly visible: every query sees every key, so the per-element mask
// test can be skipped (causal interiors, windows wider than the tile).
__device__ __forceinline__ bool tile_fully_visible(const AttentionProblem& p, int first_query, int q_rows,
                                                   int first_key, int k_rows) {
  if (q_rows < kTile || k_rows < kTile || has_documents(p)) return false;
  const int last_query = first_query + kTile - 1, last_key = first_key + kTile - 1;
  return (!p.causal || last_key <= first_query) && (p.window == 0 || last_query - first_key < p.window);
}

// Visibility of this lane's 32 scores, bit 4 i + j for (row, spot_column(half,
// i, j)) of the tile. Rows are queries (forward, dQ) or keys (dK/dV, which
// work on transposed tiles). Out-of-range rows and columns are hidden. The
// document arrays are only read when the problem has documents.
template <bool kRowsAreQueries>
__device__ __forceinline__ uint32_t lane_visible_bits(const AttentionProblem& p, int first_query, int q_rows,
                                                      const int64_t* q_docs, int first_key, int k_rows,
                                                      const int64_t* k_docs, int row, int half, bool full) {
  if (full) return ~0u;
  const bool documents = has_documents(p);
  uint32_t bits = 0;
  // Not unrolled: hoisting all 32 pairs of id loads would hold ~100 registers
  // while the kernels' accumulators are live.
#pragma unroll 1
  for (int i = 0; i < 8; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = spot_column(half, i, j);
      const int qi = kRowsAreQueries ? row : col, ki = kRowsAreQueries ? col : row;
      bool shown = qi < q_rows && ki < k_rows;
      if (shown) {
        shown = visible(p, first_query + qi, first_key + ki, documents ? q_docs[qi] : 0, documents ? k_docs[ki] : 0);
      }
      bits |= static_cast<uint32_t>(shown) << (4 * i + j);
    }
  }
  return bits;
}

// A raw score q . k to the exponent the softmax takes, in log2 units: s log2 e
// with s = raw * scale, or with a logit soft cap z log2 e, z = cap tanh(s / cap).
struct ScoreMap {
  bool capped;
  float scale_log2, cap_log2, scale_over_cap, ln2_over_cap;

  __device__ __forceinline__ explicit ScoreMap(const AttentionProblem& p)
      : capped(p.softcap > 0.0f),
        scale_log2(p.scale * kLog2e),
        cap_log2(p.softcap * kLog2e),
        scale_over_cap(capped ? p.scale / p.softcap : 0.0f),
        ln2_over_cap(capped ? kLn2 / p.softcap : 0.0f) {}

  __device__ __forceinline__ float operator()(float raw) const {
    return capped ? cap_log2 * tanhf(raw * scale_over_cap) : raw * scale_log2;
  }

  // The cap's slope dz/ds = 1 - (z / cap)^2 (only when capped), recovered from
  // P = exp2(z log2 e - lse log2 e) as the backward has it: read back from its
  // bf16 tile, the scores themselves being overwritten by dP by then and no
  // shared memory left for a third tile. P's rounding (2^-9 relative) moves z
  // by at most 2^-9, so the slope by at most 2^-8 / cap: below the bf16
  // rounding of dS itself. P = 0 (hidden, or underflowed) gives slope 0.
  __device__ __forceinline__ float slope(float prob, float lse_log2) const {
    const float t = fminf(fabsf((log2f(prob) + lse_log2) * ln2_over_cap), 1.0f);
    return 1.0f - t * t;
  }
};

// Writes four consecutive bf16 values (8 bytes; `to` is 8-byte aligned).
__device__ __forceinline__ void store4(bf16* to, float a, float b, float c, float d) {
  __nv_bfloat162* pair = reinterpret_cast<__nv_bfloat162*>(to);
  pair[0] = __floats2bfloat162_rn(a, b);
  pair[1] = __floats2bfloat162_rn(c, d);
}

// Writes this lane's half of row `row` of a warp's [16, D] f32 staging to
// global memory as bf16, times `factor`.
template <int D>
__device__ __forceinline__ void store_staged_row(const float* staging, int row, int half, float factor, bf16* dst) {
  const float* from = staging + row * kLd<D> + 4 * half;
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    const float4 x = *reinterpret_cast<const float4*>(from + 8 * i);
    store4(dst + 8 * i + 4 * half, x.x * factor, x.y * factor, x.z * factor, x.w * factor);
  }
}

// Host side: whether a problem takes the tensor-core kernels, shared by the
// forward and backward launchers (attention_tensor_core_forward.cu).
bool tensor_core_device();

}  // namespace titan::ops::cuda::attention::tensor_core
