// Flash attention backward on tensor cores (bf16, D = 64 or 128): the two
// gradient kernels of attention_backward.cu (which still computes
// D_i = rowsum(dO_i * O_i) first) with every product as wmma fragments, and
// the same determinism: no float atomics, every gradient element is summed by
// one warp in a fixed order. Layout, strides and the elementwise lane mapping:
// attention_tensor_core.cuh.
//
// Key gradients: one block per (key tile of 64, batch * kv head), 4 warps of
// 16 keys each, looping over the group's query heads and the query tiles that
// can see its keys. Scores are transposed (keys as rows), so each warp's
// accumulator rows are its own score rows. Per query tile:
//   S^T = K Q^T   -> f32 rows; P^T = exp2(S^T scale log2 e - lse log2 e) -> bf16
//   dP^T = V dO^T -> f32 rows; dV += P^T dO
//   dS^T = P^T (dP^T - D) -> bf16 (in place of P); dK += dS^T Q
// Query gradient: one block per (query tile, batch * query head), 4 warps of
// 16 queries each, over the key tiles it sees:
//   S = Q K^T, P -> bf16; dP = dO V^T; dS = P (dP - D) -> bf16; dQ += dS K
// dS uses P rounded to bf16 (it is read back from the bf16 tile the dV product
// takes): an error of 2^-9 relative per element, the size of the rounding of
// dS itself to bf16 for its product, and it saves a second f32 score buffer.
// dK and dQ are scaled once at the end. With a logit soft cap, P comes from
// the capped scores and dS takes the cap's slope (ScoreMap in
// attention_tensor_core.cuh, which recovers it from the bf16 P).
#include <cuda_bf16.h>

#include "titan/ops/cuda/attention_tensor_core.cuh"

namespace titan::ops::cuda {
namespace attention::tensor_core {
namespace {

using namespace nvcuda;
using AFragment = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using BRowFragment = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using BColFragment = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// The warp's 16 rows of A (row-major, stride kLd) times B^T for the 64 rows
// of B (row-major [64, D], stride kLd), into the warp's f32 score rows, kGroup
// score fragments per pass: fewer live accumulators against more reloads of A.
template <int D, int kGroup>
__device__ __forceinline__ void scores_times_transpose(const bf16* a, const bf16* b, float* scores) {
  constexpr int ld = kLd<D>;
#pragma unroll
  for (int n0 = 0; n0 < kScoreFragments; n0 += kGroup) {
    Accumulator acc[kGroup];
#pragma unroll
    for (int n = 0; n < kGroup; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
    for (int s = 0; s < D / kFragment; ++s) {
      AFragment a_frag;
      wmma::load_matrix_sync(a_frag, a + s * kFragment, ld);
#pragma unroll
      for (int n = 0; n < kGroup; ++n) {
        BColFragment b_frag;
        wmma::load_matrix_sync(b_frag, b + (n0 + n) * kFragment * ld + s * kFragment, ld);
        wmma::mma_sync(acc[n], a_frag, b_frag, acc[n]);
      }
    }
#pragma unroll
    for (int n = 0; n < kGroup; ++n) {
      wmma::store_matrix_sync(scores + (n0 + n) * kFragment, acc[n], kScoreLd, wmma::mem_row_major);
    }
  }
}

// acc += the warp's [16, 64] bf16 rows (stride kScoreLd) times a [64, D]
// row-major tile (stride kLd).
template <int D>
__device__ __forceinline__ void accumulate_product(const bf16* rows, const bf16* tile,
                                                   Accumulator (&acc)[D / kFragment]) {
  constexpr int ld = kLd<D>;
#pragma unroll
  for (int c = 0; c < kScoreFragments; ++c) {
    AFragment a_frag;
    wmma::load_matrix_sync(a_frag, rows + c * kFragment, kScoreLd);
#pragma unroll
    for (int s = 0; s < D / kFragment; ++s) {
      BRowFragment b_frag;
      wmma::load_matrix_sync(b_frag, tile + c * kFragment * ld + s * kFragment, ld);
      wmma::mma_sync(acc[s], a_frag, b_frag, acc[s]);
    }
  }
}

// Writes the warp's [16, D] accumulator rows (those below `rows`) to global
// memory as bf16, times `factor`, through the f32 staging area.
template <int D>
__device__ __forceinline__ void store_accumulator(const Accumulator (&acc)[D / kFragment], float* staging,
                                                  const LaneSpot& me, int rows, float factor, bf16* dst,
                                                  int64_t stride) {
  __syncwarp();  // the staging area's previous contents are read
#pragma unroll
  for (int s = 0; s < D / kFragment; ++s) {
    wmma::store_matrix_sync(staging + s * kFragment, acc[s], kLd<D>, wmma::mem_row_major);
  }
  __syncwarp();
  if (me.row < rows) store_staged_row<D>(staging, me.row, me.half, factor, dst + me.row * stride);
}

// Key gradients. Per warp: its K rows and V rows (bf16 [16, kLd] each, which
// at the end stage the f32 dV and dK rows), score rows (f32) and P / dS rows
// (bf16). Shared by the block: document ids, the query rows' lse (log2 units)
// and D, the Q and dO tiles.
template <int D>
constexpr int key_warp_bytes() {
  return kWarpRows * kLd<D> * 4 + kScoreBytes + kProbBytes;
}
constexpr int kRowStatBytes = 2 * kTile * 4;
template <int D>
constexpr int key_gradients_shared_bytes() {
  return kDocBytes + kRowStatBytes + 2 * kTile * kLd<D> * 2 + kWarps * key_warp_bytes<D>();
}

// Blocks per SM the register budget is sized for (__launch_bounds__), from
// the shared memory an H100 / H200 (227 KB) fits: D = 64 takes 65 KB (key
// gradients) and 47 KB (query gradient), so 3 blocks, 168 registers; D = 128
// takes 97 KB and 71 KB, and its accumulators (dK and dV, or dQ, Q and dO
// fragments: 128 registers) need the whole 255 of 2 blocks.
template <int D>
constexpr int key_gradients_blocks() {
  return D == 64 ? 3 : 2;
}
template <int D>
constexpr int query_gradient_blocks() {
  return D == 64 ? 3 : 2;
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads, key_gradients_blocks<D>())
    key_gradients_kernel(const AttentionProblem p, const bf16* __restrict__ q, const bf16* __restrict__ k,
                         const bf16* __restrict__ v, const bf16* __restrict__ grad_out, const float* __restrict__ lse,
                         const float* __restrict__ delta, bf16* __restrict__ grad_k, bf16* __restrict__ grad_v) {
#if TITAN_ATTENTION_TENSOR_CORES
  constexpr int kSteps = D / kFragment;
  constexpr int ld = kLd<D>;
  extern __shared__ __align__(128) unsigned char shared[];
  int64_t* q_docs = reinterpret_cast<int64_t*>(shared);
  int64_t* k_docs = q_docs + kTile;
  float* row_lse = reinterpret_cast<float*>(shared + kDocBytes);  // lse * log2 e
  float* row_delta = row_lse + kTile;
  bf16* q_tile = reinterpret_cast<bf16*>(shared + kDocBytes + kRowStatBytes);
  bf16* grad_out_tile = q_tile + kTile * ld;
  const LaneSpot me = lane_spot();
  unsigned char* area = reinterpret_cast<unsigned char*>(grad_out_tile + kTile * ld) + me.warp * key_warp_bytes<D>();
  bf16* k_rows_tile = reinterpret_cast<bf16*>(area);
  bf16* v_rows_tile = k_rows_tile + kWarpRows * ld;
  float* staging = reinterpret_cast<float*>(area);  // over K and V rows, at the end
  float* scores = reinterpret_cast<float*>(area + kWarpRows * ld * 4);
  bf16* probs = reinterpret_cast<bf16*>(area + kWarpRows * ld * 4 + kScoreBytes);

  const int64_t b = blockIdx.x / p.kv_heads;
  const int kvh = static_cast<int>(blockIdx.x % p.kv_heads), group = p.heads / p.kv_heads;
  const int k0 = static_cast<int>(blockIdx.y) * kTile;  // early keys see the most queries: first
  const int k_rows = min(kTile, p.k_len - k0);
  const int q_position = p.q_offset;  // absolute position of query 0
  const int64_t q_stride = int64_t{p.heads} * D, kv_stride = int64_t{p.kv_heads} * D;
  const int64_t kv_offset = ((b * p.k_len + k0) * p.kv_heads + kvh) * D;
  const int warp_row0 = me.warp * kWarpRows, row = warp_row0 + me.row;  // this lane's key in the tile
  const bool documents = has_documents(p);
  const ScoreMap score_map(p);

  copy_rows_async<D, kWarpRows, kWarpSize>(k + kv_offset + warp_row0 * kv_stride, kv_stride, k_rows - warp_row0,
                                           k_rows_tile, me.lane);
  copy_rows_async<D, kWarpRows, kWarpSize>(v + kv_offset + warp_row0 * kv_stride, kv_stride, k_rows - warp_row0,
                                           v_rows_tile, me.lane);
  __pipeline_commit();
  if (documents) load_documents(p, b, k0, k_rows, k_docs);
  Accumulator grad_k_frag[kSteps], grad_v_frag[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    wmma::fill_fragment(grad_k_frag[s], 0.0f);
    wmma::fill_fragment(grad_v_frag[s], 0.0f);
  }
  __pipeline_wait_prior(0);
  __syncwarp();  // the warp's K and V rows are in (only this warp reads them)

  const TileRange range = query_tiles(p, k0, k_rows);
  for (int member = 0; member < group; ++member) {
    const int h = kvh * group + member;
    const int64_t q_head = (b * p.q_len * p.heads + h) * D;  // query 0 of head h
    const int64_t row_head = (b * p.heads + h) * p.q_len;    // its lse and D
    for (int qt = range.first; qt < range.end; ++qt) {
      const int q0 = qt * kTile, q_rows = min(kTile, p.q_len - q0);
      __syncthreads();  // every warp is done with the previous Q, dO, lse, D and ids
      copy_rows_async<D, kTile, kBlockThreads>(q + q_head + q0 * q_stride, q_stride, q_rows, q_tile, threadIdx.x);
      __pipeline_commit();
      copy_rows_async<D, kTile, kBlockThreads>(grad_out + q_head + q0 * q_stride, q_stride, q_rows, grad_out_tile,
                                               threadIdx.x);
      __pipeline_commit();
      const int t = static_cast<int>(threadIdx.x);
      if (t < kTile) {
        row_lse[t] = t < q_rows ? lse[row_head + q0 + t] * kLog2e : -INFINITY;
        row_delta[t] = t < q_rows ? delta[row_head + q0 + t] : 0.0f;
      }
      if (documents) {
        load_query_documents(p, b, q0, q_rows, q_docs);
        __syncthreads();  // q_docs (and on the first pass k_docs) are in place
      }
      const bool full = tile_fully_visible(p, q_position + q0, q_rows, k0, k_rows);
      const uint32_t bits =
          lane_visible_bits<false>(p, q_position + q0, q_rows, q_docs, k0, k_rows, k_docs, row, me.half, full);
      if (__syncthreads_or(bits != 0) == 0) {  // the mask hides the whole tile
        __pipeline_wait_prior(0);              // the copies land before the buffers are requested again
        continue;
      }
      __pipeline_wait_prior(1);  // Q
      __syncthreads();           // everyone's Q copies; lse and D

      // S^T = K Q^T, then P^T (bf16) from it.
      scores_times_transpose<D, 2>(k_rows_tile, q_tile, scores);
      __syncwarp();
      {
        // The elementwise loops here run two of their 8 steps per iteration:
        // fully unrolled, the compiler hoists all 32 elements' loads and
        // spills accumulators around them.
        const float* score_row = scores + me.row * kScoreLd + 4 * me.half;
        bf16* prob_row = probs + me.row * kScoreLd + 4 * me.half;
#pragma unroll 2
        for (int i = 0; i < 8; ++i) {
          const float4 f = *reinterpret_cast<const float4*>(score_row + 8 * i);
          const float fs[4] = {f.x, f.y, f.z, f.w};
          float prob[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float query_lse = row_lse[spot_column(me.half, i, j)];
            // lse = -inf only for a row that saw no key: P = 0 there, as the mask says.
            prob[j] = (bits >> (4 * i + j)) & 1u && query_lse != -INFINITY ? exp2f(score_map(fs[j]) - query_lse) : 0.0f;
          }
          store4(prob_row + 8 * i, prob[0], prob[1], prob[2], prob[3]);
        }
      }
      __pipeline_wait_prior(0);  // dO
      __syncthreads();           // everyone's dO copies; the scores are read

      // dP^T = V dO^T; dV += P^T dO.
      scores_times_transpose<D, 2>(v_rows_tile, grad_out_tile, scores);
      accumulate_product<D>(probs, grad_out_tile, grad_v_frag);
      __syncwarp();  // dP^T is stored and P^T loaded by every lane
      {
        const float* score_row = scores + me.row * kScoreLd + 4 * me.half;
        bf16* prob_row = probs + me.row * kScoreLd + 4 * me.half;
#pragma unroll 2
        for (int i = 0; i < 8; ++i) {
          const float4 f = *reinterpret_cast<const float4*>(score_row + 8 * i);
          const float dp[4] = {f.x, f.y, f.z, f.w};
          const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(prob_row + 8 * i);
          const float prob[4] = {__low2float(pair[0]), __high2float(pair[0]), __low2float(pair[1]),
                                 __high2float(pair[1])};
          float ds[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int col = spot_column(me.half, i, j);
            ds[j] = prob[j] * (dp[j] - row_delta[col]);
            if (score_map.capped) ds[j] *= score_map.slope(prob[j], row_lse[col]);
          }
          store4(prob_row + 8 * i, ds[0], ds[1], ds[2], ds[3]);
        }
      }
      __syncwarp();
      accumulate_product<D>(probs, q_tile, grad_k_frag);  // dK += dS^T Q (scaled at the end)
    }
  }

  // Every key gets its dK and dV written, zeros included when no query sees it.
  store_accumulator<D>(grad_v_frag, staging, me, k_rows - warp_row0, 1.0f, grad_v + kv_offset + warp_row0 * kv_stride,
                       kv_stride);
  store_accumulator<D>(grad_k_frag, staging, me, k_rows - warp_row0, p.scale,
                       grad_k + kv_offset + warp_row0 * kv_stride, kv_stride);
#else
  __trap();
#endif
}

// Query gradient. Per warp: its Q and dO rows (bf16 [16, kLd] each, loaded
// once into fragments; the area then holds the score rows and the dS rows,
// and at the end stages the f32 dQ rows). Shared by the block: document ids,
// the K and V tiles.
template <int D>
constexpr int query_warp_bytes() {
  return max_of(kWarpRows * kLd<D> * 4, kScoreBytes + kProbBytes);
}
template <int D>
constexpr int query_gradient_shared_bytes() {
  return kDocBytes + 2 * kTile * kLd<D> * 2 + kWarps * query_warp_bytes<D>();
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads, query_gradient_blocks<D>())
    query_gradient_kernel(const AttentionProblem p, const bf16* __restrict__ q, const bf16* __restrict__ k,
                          const bf16* __restrict__ v, const bf16* __restrict__ grad_out, const float* __restrict__ lse,
                          const float* __restrict__ delta, bf16* __restrict__ grad_q) {
#if TITAN_ATTENTION_TENSOR_CORES
  constexpr int kSteps = D / kFragment;
  constexpr int ld = kLd<D>;
  extern __shared__ __align__(128) unsigned char shared[];
  int64_t* q_docs = reinterpret_cast<int64_t*>(shared);
  int64_t* k_docs = q_docs + kTile;
  bf16* k_tile = reinterpret_cast<bf16*>(shared + kDocBytes);
  bf16* v_tile = k_tile + kTile * ld;
  const LaneSpot me = lane_spot();
  unsigned char* area = reinterpret_cast<unsigned char*>(v_tile + kTile * ld) + me.warp * query_warp_bytes<D>();
  bf16* q_rows_tile = reinterpret_cast<bf16*>(area);
  bf16* grad_out_rows_tile = q_rows_tile + kWarpRows * ld;
  float* scores = reinterpret_cast<float*>(area);
  bf16* probs = reinterpret_cast<bf16*>(area + kScoreBytes);
  float* staging = reinterpret_cast<float*>(area);

  const int64_t b = blockIdx.x / p.heads;
  const int h = static_cast<int>(blockIdx.x % p.heads), kvh = h / (p.heads / p.kv_heads);
  const int q0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kTile;  // longest causal tiles first
  const int q_rows = min(kTile, p.q_len - q0);
  const int first_query = p.q_offset + q0;
  const int64_t q_stride = int64_t{p.heads} * D, kv_stride = int64_t{p.kv_heads} * D;
  const int64_t q_offset = ((b * p.q_len + q0) * p.heads + h) * D;
  const bf16* k_head = k + (b * p.k_len * p.kv_heads + kvh) * D;
  const bf16* v_head = v + (b * p.k_len * p.kv_heads + kvh) * D;
  const int64_t row_head = (b * p.heads + h) * p.q_len + q0;
  const int warp_row0 = me.warp * kWarpRows, row = warp_row0 + me.row;  // this lane's query in the tile
  const bool documents = has_documents(p);
  const ScoreMap score_map(p);

  // The warp's Q and dO rows (one group), then the first K and V tiles (the next).
  const TileRange range = key_tiles(p, q0, q_rows);
  copy_rows_async<D, kWarpRows, kWarpSize>(q + q_offset + warp_row0 * q_stride, q_stride, q_rows - warp_row0,
                                           q_rows_tile, me.lane);
  copy_rows_async<D, kWarpRows, kWarpSize>(grad_out + q_offset + warp_row0 * q_stride, q_stride, q_rows - warp_row0,
                                           grad_out_rows_tile, me.lane);
  __pipeline_commit();
  if (range.first < range.end) {
    const int first_rows = min(kTile, p.k_len - range.first * kTile);
    copy_rows_async<D, kTile, kBlockThreads>(k_head + range.first * kTile * kv_stride, kv_stride, first_rows, k_tile,
                                             threadIdx.x);
    copy_rows_async<D, kTile, kBlockThreads>(v_head + range.first * kTile * kv_stride, kv_stride, first_rows, v_tile,
                                             threadIdx.x);
  }
  __pipeline_commit();
  if (documents) load_query_documents(p, b, q0, q_rows, q_docs);
  const float query_lse = row < q_rows ? lse[row_head + row] * kLog2e : -INFINITY;
  const float query_delta = row < q_rows ? delta[row_head + row] : 0.0f;
  __pipeline_wait_prior(1);
  __syncwarp();  // every lane's Q and dO copies have landed
  AFragment q_frag[kSteps], grad_out_frag[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    wmma::load_matrix_sync(q_frag[s], q_rows_tile + s * kFragment, ld);
    wmma::load_matrix_sync(grad_out_frag[s], grad_out_rows_tile + s * kFragment, ld);
  }
  Accumulator grad_q_frag[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) wmma::fill_fragment(grad_q_frag[s], 0.0f);
  __syncwarp();  // the rows are in registers before the area is reused

  // Invariant at the top of the loop: the copies of K(kt) and V(kt) are
  // requested; nothing else is in flight that the loop waits for.
  for (int kt = range.first; kt < range.end; ++kt) {
    const int k0 = kt * kTile, k_rows = min(kTile, p.k_len - k0);
    const bool has_next = kt + 1 < range.end;
    const int next_rows = has_next ? min(kTile, p.k_len - k0 - kTile) : 0;
    const int64_t next_offset = (k0 + kTile) * kv_stride;
    if (documents) {
      load_documents(p, b, k0, k_rows, k_docs);
      __syncthreads();  // k_docs (and on the first pass q_docs) are in place
    }
    const bool full = tile_fully_visible(p, first_query, q_rows, k0, k_rows);
    const uint32_t bits =
        lane_visible_bits<true>(p, first_query, q_rows, q_docs, k0, k_rows, k_docs, row, me.half, full);
    if (__syncthreads_or(bits != 0) == 0) {  // the mask hides the whole tile
      __pipeline_wait_prior(0);              // K(kt) and V(kt) land before their buffers are requested again
      if (has_next) {
        copy_rows_async<D, kTile, kBlockThreads>(k_head + next_offset, kv_stride, next_rows, k_tile, threadIdx.x);
        copy_rows_async<D, kTile, kBlockThreads>(v_head + next_offset, kv_stride, next_rows, v_tile, threadIdx.x);
      }
      __pipeline_commit();
      continue;
    }
    __pipeline_wait_prior(0);
    __syncthreads();  // everyone's K(kt) and V(kt) copies

    // S = Q K^T, then P (bf16) from it.
#pragma unroll
    for (int n = 0; n < kScoreFragments; ++n) {
      Accumulator acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        BColFragment k_frag;
        wmma::load_matrix_sync(k_frag, k_tile + n * kFragment * ld + s * kFragment, ld);
        wmma::mma_sync(acc, q_frag[s], k_frag, acc);
      }
      wmma::store_matrix_sync(scores + n * kFragment, acc, kScoreLd, wmma::mem_row_major);
    }
    __syncwarp();
    const float* score_row = scores + me.row * kScoreLd + 4 * me.half;
    bf16* prob_row = probs + me.row * kScoreLd + 4 * me.half;
#pragma unroll 2
    for (int i = 0; i < 8; ++i) {
      const float4 f = *reinterpret_cast<const float4*>(score_row + 8 * i);
      const float fs[4] = {f.x, f.y, f.z, f.w};
      float prob[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        prob[j] = (bits >> (4 * i + j)) & 1u && query_lse != -INFINITY ? exp2f(score_map(fs[j]) - query_lse) : 0.0f;
      }
      store4(prob_row + 8 * i, prob[0], prob[1], prob[2], prob[3]);
    }
    __syncwarp();  // the scores are read before dP overwrites them

    // dP = dO V^T.
#pragma unroll
    for (int n = 0; n < kScoreFragments; ++n) {
      Accumulator acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        BColFragment v_frag;
        wmma::load_matrix_sync(v_frag, v_tile + n * kFragment * ld + s * kFragment, ld);
        wmma::mma_sync(acc, grad_out_frag[s], v_frag, acc);
      }
      wmma::store_matrix_sync(scores + n * kFragment, acc, kScoreLd, wmma::mem_row_major);
    }
    __syncthreads();  // every warp is done with V(kt); the dP rows are stored
    if (has_next) {
      copy_rows_async<D, kTile, kBlockThreads>(v_head + next_offset, kv_stride, next_rows, v_tile, threadIdx.x);
    }
    __pipeline_commit();

    // dS = P (dP - D), in place of P.
#pragma unroll 2
    for (int i = 0; i < 8; ++i) {
      const float4 f = *reinterpret_cast<const float4*>(score_row + 8 * i);
      const float dp[4] = {f.x, f.y, f.z, f.w};
      const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(prob_row + 8 * i);
      const float prob[4] = {__low2float(pair[0]), __high2float(pair[0]), __low2float(pair[1]), __high2float(pair[1])};
      float ds[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        ds[j] = prob[j] * (dp[j] - query_delta);
        if (score_map.capped) ds[j] *= score_map.slope(prob[j], query_lse);
      }
      store4(prob_row + 8 * i, ds[0], ds[1], ds[2], ds[3]);
    }
    __syncwarp();
    accumulate_product<D>(probs, k_tile, grad_q_frag);  // dQ += dS K (scaled at the end)
    __syncthreads();                                    // every warp is done with K(kt)
    if (has_next) {
      copy_rows_async<D, kTile, kBlockThreads>(k_head + next_offset, kv_stride, next_rows, k_tile, threadIdx.x);
    }
    __pipeline_commit();
  }
  __pipeline_wait_prior(0);

  store_accumulator<D>(grad_q_frag, staging, me, q_rows - warp_row0, p.scale, grad_q + q_offset + warp_row0 * q_stride,
                       q_stride);
#else
  __trap();
#endif
}

template <int D>
cudaError_t launch_gradients(const AttentionProblem& p, const void* grad_out, const void* q, const void* k,
                             const void* v, const float* lse, const float* delta, void* grad_q, void* grad_k,
                             void* grad_v, cudaStream_t stream) {
  const bf16* q_data = static_cast<const bf16*>(q);
  const bf16* k_data = static_cast<const bf16*>(k);
  const bf16* v_data = static_cast<const bf16*>(v);
  const bf16* grad_out_data = static_cast<const bf16*>(grad_out);
  // Every key gets its dK and dV written, zeros included when no query sees it.
  if (p.batch * p.kv_heads > 0 && p.k_len > 0) {
    constexpr int shared = key_gradients_shared_bytes<D>();
    const auto kernel = key_gradients_kernel<D>;
    cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    if (status != cudaSuccess) return status;
    const dim3 grid(static_cast<unsigned>(p.batch * p.kv_heads), static_cast<unsigned>(tiles(p.k_len)));
    kernel<<<grid, kBlockThreads, shared, stream>>>(p, q_data, k_data, v_data, grad_out_data, lse, delta,
                                                    static_cast<bf16*>(grad_k), static_cast<bf16*>(grad_v));
    if (status = cudaGetLastError(); status != cudaSuccess) return status;
  }
  if (p.batch * p.q_len * p.heads > 0) {
    constexpr int shared = query_gradient_shared_bytes<D>();
    const auto kernel = query_gradient_kernel<D>;
    cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    if (status != cudaSuccess) return status;
    const dim3 grid(static_cast<unsigned>(p.batch * p.heads), static_cast<unsigned>(tiles(p.q_len)));
    kernel<<<grid, kBlockThreads, shared, stream>>>(p, q_data, k_data, v_data, grad_out_data, lse, delta,
                                                    static_cast<bf16*>(grad_q));
    if (status = cudaGetLastError(); status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace
}  // namespace attention::tensor_core

cudaError_t launch_attention_gradients_tensor_core(const AttentionProblem& problem, const void* grad_out, const void* q,
                                                   const void* k, const void* v, const float* lse, const float* delta,
                                                   void* grad_q, void* grad_k, void* grad_v, cudaStream_t stream) {
  return problem.dim == 64 ? attention::tensor_core::launch_gradients<64>(problem, grad_out, q, k, v, lse, delta,
                                                                          grad_q, grad_k, grad_v, stream)
                           : attention::tensor_core::launch_gradients<128>(problem, grad_out, q, k, v, lse, delta,
                                                                           grad_q, grad_k, grad_v, stream);
}

}  // namespace titan::ops::cuda
