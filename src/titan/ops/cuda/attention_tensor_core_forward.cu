// Flash attention forward on tensor cores (bf16, D = 64 or 128): the
// FlashAttention-2 algorithm of attention.cu with both products, S = Q K^T
// and O += P V, as wmma fragments. Layout, strides and the elementwise lane
// mapping: attention_tensor_core.cuh.
//
// One block per (query tile of 64 rows, batch * query head), 4 warps of 16
// query rows each. A warp keeps its Q rows as A fragments and its [16, D]
// output accumulator in registers for the whole key loop. Per key tile:
//   1. S = Q K^T into the warp's f32 score rows in shared memory;
//   2. scalar: mask, row max, P = exp2(S * scale * log2 e - m) (with a logit
//      soft cap, S * scale is capped first: ScoreMap), row sums, P
//      rounded once to bf16 (as FlashAttention does: the PV product takes bf16
//      operands; the row sums l keep the f32 P, so lse is f32-accurate);
//   3. O += P V.
// K(t + 1) streams in (cp.async) while the block does the softmax and PV of
// tile t, V(t) while it does S; one K and one V buffer suffice because each is
// requested only after every warp is done with its previous contents.
//
// Lazy rescaling. Online softmax rescales O whenever a row's max grows, but
// the accumulator lives in fragments whose elements we may not touch: a
// rescale is a round trip of the warp's O through shared memory. So each row
// keeps a reference max m that only moves when a score exceeds it by more
// than 2^kRescaleThreshold (then O and l are scaled by exp2(m_old - m_new));
// otherwise P = exp2(s - m) <= 2^8, harmless in f32 and bf16. The result is
// the same softmax: O = sum P V / l and lse = m + log l hold for any fixed m.
// The round trip is taken per warp, only when one of its rows moved m.
#include <cuda_bf16.h>

#include "titan/ops/cuda/attention_tensor_core.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace attention::tensor_core {
namespace {

// Per warp: score rows (f32 [16, 72]) then P (bf16 [16, 72]); the output
// staging (f32 [16, kLd]) and, at the start, the Q rows (bf16) reuse the area.
template <int D>
constexpr int forward_warp_bytes() {
  return max_of(kScoreBytes + kProbBytes, kWarpRows * kLd<D> * 4);
}
// Document ids, the K tile, the V tile, the warps' areas.
template <int D>
constexpr int forward_shared_bytes() {
  return kDocBytes + 2 * kTile * kLd<D> * 2 + kWarps * forward_warp_bytes<D>();
}

// Blocks per SM the register budget is sized for (__launch_bounds__): the
// shared memory of an H100 / H200 (227 KB) fits 4 blocks for D = 64 (47 KB,
// 128 registers) and 3 for D = 128 (71 KB, 168 registers: O and Q fragments
// take 96).
template <int D>
constexpr int forward_blocks() {
  return D == 64 ? 4 : 3;
}

template <int D>
__global__ void __launch_bounds__(kBlockThreads, forward_blocks<D>())
    forward_kernel(const AttentionProblem p, const bf16* __restrict__ q, const bf16* __restrict__ k,
                   const bf16* __restrict__ v, bf16* __restrict__ out, float* __restrict__ lse) {
#if TITAN_ATTENTION_TENSOR_CORES
  using namespace nvcuda;
  constexpr int kSteps = D / kFragment;  // fragments along D
  constexpr int ld = kLd<D>;
  extern __shared__ __align__(128) unsigned char shared[];
  int64_t* q_docs = reinterpret_cast<int64_t*>(shared);
  int64_t* k_docs = q_docs + kTile;
  bf16* k_tile = reinterpret_cast<bf16*>(shared + kDocBytes);
  bf16* v_tile = k_tile + kTile * ld;
  const LaneSpot me = lane_spot();
  unsigned char* area = reinterpret_cast<unsigned char*>(v_tile + kTile * ld) + me.warp * forward_warp_bytes<D>();
  float* scores = reinterpret_cast<float*>(area);
  bf16* probs = reinterpret_cast<bf16*>(area + kScoreBytes);
  float* staging = reinterpret_cast<float*>(area);
  bf16* q_rows_tile = reinterpret_cast<bf16*>(area);

  const int64_t b = blockIdx.x / p.heads;
  const int h = static_cast<int>(blockIdx.x % p.heads), kvh = h / (p.heads / p.kv_heads);
  const int q0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kTile;  // longest causal tiles first
  const int q_rows = min(kTile, p.q_len - q0);
  const int first_query = p.q_offset + q0;
  const int64_t q_stride = int64_t{p.heads} * D, kv_stride = int64_t{p.kv_heads} * D;
  const bf16* k_head = k + (b * p.k_len * p.kv_heads + kvh) * D;
  const bf16* v_head = v + (b * p.k_len * p.kv_heads + kvh) * D;
  const int64_t q_offset = ((b * p.q_len + q0) * p.heads + h) * D;
  const int warp_row0 = me.warp * kWarpRows, row = warp_row0 + me.row;  // this lane's row in the tile
  const bool documents = has_documents(p);
  const ScoreMap score_map(p);

  // The warp's Q rows (one group), then the first K tile (the next group).
  const TileRange range = key_tiles(p, q0, q_rows);
  copy_rows_async<D, kWarpRows, kWarpSize>(q + q_offset + warp_row0 * q_stride, q_stride, q_rows - warp_row0,
                                           q_rows_tile, me.lane);
  __pipeline_commit();
  if (range.first < range.end) {
    copy_rows_async<D, kTile, kBlockThreads>(k_head + range.first * kTile * kv_stride, kv_stride,
                                             min(kTile, p.k_len - range.first * kTile), k_tile, threadIdx.x);
  }
  __pipeline_commit();
  if (documents) load_query_documents(p, b, q0, q_rows, q_docs);
  __pipeline_wait_prior(1);
  __syncwarp();  // every lane's Q copies have landed
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> q_frag[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) wmma::load_matrix_sync(q_frag[s], q_rows_tile + s * kFragment, ld);
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> o_frag[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) wmma::fill_fragment(o_frag[s], 0.0f);
  __syncwarp();  // the Q rows are in registers before the area is reused

  float row_ref = -INFINITY, row_sum = 0.0f;  // reference max (log2 units) and sum of exp2(s - ref)
  // Invariant at the top of the loop: the copy of K(kt) is in flight (the most
  // recent group), V(kt) not yet requested.
  for (int kt = range.first; kt < range.end; ++kt) {
    const int k0 = kt * kTile, k_rows = min(kTile, p.k_len - k0);
    const bool has_next = kt + 1 < range.end;
    const int next_rows = has_next ? min(kTile, p.k_len - k0 - kTile) : 0;
    if (documents) {
      load_documents(p, b, k0, k_rows, k_docs);
      __syncthreads();  // k_docs (and on the first pass q_docs) are in place
    }
    const bool full = tile_fully_visible(p, first_query, q_rows, k0, k_rows);
    const uint32_t bits =
        lane_visible_bits<true>(p, first_query, q_rows, q_docs, k0, k_rows, k_docs, row, me.half, full);
    // Also the barrier after which no warp reads V(kt - 1) any more.
    if (__syncthreads_or(bits != 0) == 0) {  // the mask hides the whole tile
      __pipeline_wait_prior(0);              // K(kt) must land before its buffer is requested again
      if (has_next) {
        copy_rows_async<D, kTile, kBlockThreads>(k_head + (k0 + kTile) * kv_stride, kv_stride, next_rows, k_tile,
                                                 threadIdx.x);
      }
      __pipeline_commit();
      continue;
    }
    copy_rows_async<D, kTile, kBlockThreads>(v_head + k0 * kv_stride, kv_stride, k_rows, v_tile, threadIdx.x);
    __pipeline_commit();
    __pipeline_wait_prior(1);  // K(kt)
    __syncthreads();           // everyone's K(kt) copies

    // 1. S = Q K^T, this warp's 16 rows by 64 keys.
#pragma unroll
    for (int n = 0; n < kScoreFragments; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> s_frag;
      wmma::fill_fragment(s_frag, 0.0f);
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> k_frag;
        wmma::load_matrix_sync(k_frag, k_tile + n * kFragment * ld + s * kFragment, ld);
        wmma::mma_sync(s_frag, q_frag[s], k_frag, s_frag);
      }
      wmma::store_matrix_sync(scores + n * kFragment, s_frag, kScoreLd, wmma::mem_row_major);
    }
    __syncthreads();  // every warp is done with K(kt)
    if (has_next) {
      copy_rows_async<D, kTile, kBlockThreads>(k_head + (k0 + kTile) * kv_stride, kv_stride, next_rows, k_tile,
                                               threadIdx.x);
    }
    __pipeline_commit();

    // 2. Online softmax on the lane's 32 scores of its row.
    float x[8][4];
    float tile_max = -INFINITY;
    const float* score_row = scores + me.row * kScoreLd + 4 * me.half;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 f = *reinterpret_cast<const float4*>(score_row + 8 * i);
      const float fs[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        x[i][j] = (bits >> (4 * i + j)) & 1u ? score_map(fs[j]) : -INFINITY;
        tile_max = fmaxf(tile_max, x[i][j]);
      }
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    float correction = 1.0f;
    bool rescale = false;
    // -inf + threshold is -inf: the first visible score always sets the reference.
    if (tile_max > row_ref + kRescaleThreshold) {
      if (row_ref != -INFINITY) {
        correction = exp2f(row_ref - tile_max);
        rescale = true;
      }
      row_ref = tile_max;
    }
    // A row with nothing visible yet keeps P = 0 (subtracting 0, not -inf - -inf).
    const float base = row_ref == -INFINITY ? 0.0f : row_ref;
    __nv_bfloat162 packed[8][2];
    float part = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float e[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        e[j] = exp2f(x[i][j] - base);
        part += e[j];
      }
      packed[i][0] = __floats2bfloat162_rn(e[0], e[1]);
      packed[i][1] = __floats2bfloat162_rn(e[2], e[3]);
    }
    part += __shfl_xor_sync(0xffffffffu, part, 1);
    row_sum = row_sum * correction + part;
    __syncwarp();  // the warp's scores are read: the area may be overwritten
    if (__any_sync(0xffffffffu, rescale)) {
      // Scale the warp's O rows through shared memory (rows whose reference
      // did not move have correction 1).
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        wmma::store_matrix_sync(staging + s * kFragment, o_frag[s], ld, wmma::mem_row_major);
      }
      __syncwarp();
      float* staged = staging + me.row * ld + 4 * me.half;
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        float4 y = *reinterpret_cast<float4*>(staged + 8 * i);
        y.x *= correction;
        y.y *= correction;
        y.z *= correction;
        y.w *= correction;
        *reinterpret_cast<float4*>(staged + 8 * i) = y;
      }
      __syncwarp();
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        wmma::load_matrix_sync(o_frag[s], staging + s * kFragment, ld, wmma::mem_row_major);
      }
      __syncwarp();  // the staging (which overlaps P) is read
    }
    bf16* prob_row = probs + me.row * kScoreLd + 4 * me.half;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      __nv_bfloat162* to = reinterpret_cast<__nv_bfloat162*>(prob_row + 8 * i);
      to[0] = packed[i][0];
      to[1] = packed[i][1];
    }
    __pipeline_wait_prior(1);  // V(kt)
    __syncthreads();           // everyone's V(kt) copies; also orders the P writes

    // 3. O += P V.
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> p_frag[kScoreFragments];
#pragma unroll
    for (int c = 0; c < kScoreFragments; ++c) wmma::load_matrix_sync(p_frag[c], probs + c * kFragment, kScoreLd);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
#pragma unroll
      for (int c = 0; c < kScoreFragments; ++c) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> v_frag;
        wmma::load_matrix_sync(v_frag, v_tile + c * kFragment * ld + s * kFragment, ld);
        wmma::mma_sync(o_frag[s], p_frag[c], v_frag, o_frag[s]);
      }
    }
  }
  __pipeline_wait_prior(0);

  // O = acc / l and lse = (m + log2 l) ln 2; a row that saw no key outputs
  // zeros with lse = -inf. l >= 1 once a key is visible (the score that set m
  // contributes exp2(0)).
  __syncwarp();  // every lane has loaded its P fragments before the staging overwrites them
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    wmma::store_matrix_sync(staging + s * kFragment, o_frag[s], ld, wmma::mem_row_major);
  }
  __syncwarp();
  // A NaN sum (a NaN score) counts as seen: the NaN reaches the output and lse, as on the CPU.
  const bool seen = row_sum != 0.0f;
  if (row < q_rows) {
    store_staged_row<D>(staging, me.row, me.half, seen ? 1.0f / row_sum : 0.0f, out + q_offset + row * q_stride);
    if (me.half == 0) {
      lse[(b * p.heads + h) * p.q_len + q0 + row] = seen ? (row_ref + log2f(row_sum)) * kLn2 : -INFINITY;
    }
  }
#else
  __trap();
#endif
}

template <int D>
cudaError_t launch_forward(const AttentionProblem& p, const void* q, const void* k, const void* v, void* out,
                           float* lse, cudaStream_t stream) {
  constexpr int shared = forward_shared_bytes<D>();
  const auto kernel = forward_kernel<D>;
  const cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
  if (status != cudaSuccess) return status;
  const dim3 grid(static_cast<unsigned>(p.batch * p.heads), static_cast<unsigned>(tiles(p.q_len)));
  kernel<<<grid, kBlockThreads, shared, stream>>>(p, static_cast<const bf16*>(q), static_cast<const bf16*>(k),
                                                  static_cast<const bf16*>(v), static_cast<bf16*>(out), lse);
  return cudaGetLastError();
}

}  // namespace

bool tensor_core_device() { return compute_capability() >= 80; }

}  // namespace attention::tensor_core

bool attention_tensor_cores(AttentionElement element, const AttentionProblem& problem,
                            std::initializer_list<const void*> tensors) {
  if (element != AttentionElement::bf16 || (problem.dim != 64 && problem.dim != 128)) return false;
  // cp.async moves 16-byte pieces: every row must start 16-byte aligned, which
  // D * 2 bytes per row guarantees once the base pointers are.
  for (const void* t : tensors) {
    if (reinterpret_cast<uintptr_t>(t) % 16 != 0) return false;
  }
  return attention::tensor_core::tensor_core_device();
}

cudaError_t launch_attention_forward_tensor_core(const AttentionProblem& problem, const void* q, const void* k,
                                                 const void* v, void* out, float* lse, cudaStream_t stream) {
  return problem.dim == 64 ? attention::tensor_core::launch_forward<64>(problem, q, k, v, out, lse, stream)
                           : attention::tensor_core::launch_forward<128>(problem, q, k, v, out, lse, stream);
}

}  // namespace titan::ops::cuda
