// Flash attention backward on CUDA cores, deterministic: no float atomics,
// every gradient element is summed by one thread in a fixed order, so two
// runs give the same bits. Three kernels:
//  1. delta: D_i = rowsum(dO_i * O_i), one warp per (batch, query, head).
//  2. key gradients: one block per (key tile, batch * kv head) loops over the
//     group's query heads and the query tiles that can see its keys,
//     recomputes P = exp(S - lse) and dS = P * (dP - D) with dP = dO V^T, and
//     accumulates dV += P^T dO and dK += dS^T Q in registers; dK is scaled once
//     at the end.
//  3. query gradient: one block per (query tile, batch * query head) walks the
//     key tiles it sees, recomputes P and dS and accumulates dQ += dS K.
// P and dS are computed twice (in 2 and 3): FlashAttention-2 instead adds dQ
// atomically from kernel 2, which is neither deterministic nor needed here.
// The dK/dV kernel works on transposed score tiles (keys as rows) so that its
// accumulator rows are the thread's own score rows. Thread layout:
// attention_tile.cuh.
//
// With a logit soft cap, the recomputed scores are capped, z = cap tanh(S / cap),
// P = exp(z - lse), and dS = P * (dP - D) * (1 - (z / cap)^2).
#include <cuda_bf16.h>

#include "titan/ops/cuda/attention_tile.cuh"

namespace titan::ops::cuda {
namespace attention {
namespace {

constexpr int kDeltaRowsPerBlock = kThreads / kWarpSize;

template <typename T>
__global__ void __launch_bounds__(kThreads) delta_kernel(const AttentionProblem p, const T* __restrict__ grad_out,
                                                         const T* __restrict__ out, float* __restrict__ delta) {
  // Row (b, i, h) of the [B, Sq, Hq, D] tensors; a warp never straddles rows,
  // so a whole warp returns together and the shuffles below stay full.
  const int64_t row = int64_t{blockIdx.x} * kDeltaRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= p.batch * p.q_len * p.heads) return;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const T* o = out + row * p.dim;
  const T* g = grad_out + row * p.dim;
  float dot = 0.0f;
  for (int d = lane; d < p.dim; d += kWarpSize) dot = fmaf(load_f32(o, d), load_f32(g, d), dot);
  dot = warp_sum(dot);
  if (lane == 0) {
    const int64_t h = row % p.heads, bi = row / p.heads, i = bi % p.q_len, b = bi / p.q_len;
    delta[(b * p.heads + h) * p.q_len + i] = dot;  // laid out like lse: [B, Hq, Sq]
  }
}

// Shared memory: document ids of the query and key tiles, the query rows'
// lse and D, the K, V, Q and dO tiles, and one score tile (P, then dS).
size_t key_gradients_shared_bytes(int dim) {
  return 2 * kTile * sizeof(int64_t) +
         (2 * kTile + 4 * kTile * tile_stride(dim) + kTile * kScoreStride) * sizeof(float);
}

template <typename T, int kMaxD>
__global__ void __launch_bounds__(kThreads)
    key_gradients_kernel(const AttentionProblem p, const T* __restrict__ q, const T* __restrict__ k,
                         const T* __restrict__ v, const T* __restrict__ grad_out, const float* __restrict__ lse,
                         const float* __restrict__ delta, T* __restrict__ grad_k, T* __restrict__ grad_v) {
  constexpr int kCols = kMaxD / kSide;
  extern __shared__ __align__(16) unsigned char shared[];
  const int ld = tile_stride(p.dim);
  int64_t* q_docs = reinterpret_cast<int64_t*>(shared);
  int64_t* k_docs = q_docs + kTile;
  float* row_lse = reinterpret_cast<float*>(k_docs + kTile);
  float* row_delta = row_lse + kTile;
  float* k_tile = row_delta + kTile;
  float* v_tile = k_tile + kTile * ld;
  float* q_tile = v_tile + kTile * ld;
  float* grad_out_tile = q_tile + kTile * ld;
  float* scores = grad_out_tile + kTile * ld;

  const int tx = static_cast<int>(threadIdx.x) % kSide, ty = static_cast<int>(threadIdx.x) / kSide;
  const int64_t b = blockIdx.x / p.kv_heads;
  const int kvh = static_cast<int>(blockIdx.x % p.kv_heads), group = p.heads / p.kv_heads;
  // Causal: early keys are seen by the most queries, and go first.
  const int k0 = static_cast<int>(blockIdx.y) * kTile;
  const int k_rows = min(kTile, p.k_len - k0);
  const int q_position = p.q_offset;  // absolute position of query 0
  const int64_t q_stride = int64_t{p.heads} * p.dim, kv_stride = int64_t{p.kv_heads} * p.dim;
  const int64_t kv_offset = ((b * p.k_len + k0) * p.kv_heads + kvh) * p.dim;

  load_tile(k + kv_offset, kv_stride, k_rows, p.dim, k_tile, ld);
  load_tile(v + kv_offset, kv_stride, k_rows, p.dim, v_tile, ld);
  load_documents(p, b, k0, k_rows, k_docs);

  int cols[kCols];
  owned_columns(p.dim, tx, cols);
  float acc_k[kMicro][kCols], acc_v[kMicro][kCols];
#pragma unroll
  for (int i = 0; i < kMicro; ++i) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc_k[i][j] = acc_v[i][j] = 0.0f;
  }

  const TileRange range = query_tiles(p, k0, k_rows);
  for (int member = 0; member < group; ++member) {
    const int h = kvh * group + member;
    const int64_t q_head = (b * p.q_len * p.heads + h) * p.dim;  // query 0 of head h
    const int64_t row_head = (b * p.heads + h) * p.q_len;        // its lse and D
    for (int qt = range.first; qt < range.end; ++qt) {
      const int q0 = qt * kTile, q_rows = min(kTile, p.q_len - q0);
      load_query_documents(p, b, q0, q_rows, q_docs);
      const int t = static_cast<int>(threadIdx.x);
      if (t < kTile) {
        row_lse[t] = t < q_rows ? lse[row_head + q0 + t] : -INFINITY;
        row_delta[t] = t < q_rows ? delta[row_head + q0 + t] : 0.0f;
      }
      __syncthreads();  // ids, lse and D (and on the first pass K, V and k_docs) are in place
      const uint32_t bits = visible_bits<false>(p, q_position + q0, q_rows, q_docs, k0, k_rows, k_docs, ty, tx);
      if (__syncthreads_or(bits != 0) == 0) continue;  // the mask hides the whole tile

      load_tile(q + q_head + q0 * q_stride, q_stride, q_rows, p.dim, q_tile, ld);
      load_tile(grad_out + q_head + q0 * q_stride, q_stride, q_rows, p.dim, grad_out_tile, ld);
      __syncthreads();
      // Transposed tiles: s[i][j] = S[query tx + 16 j, key ty + 16 i], dp likewise.
      float s[kMicro][kMicro] = {}, dp[kMicro][kMicro] = {};
      tile_dot(k_tile, q_tile, ld, p.dim, ty, tx, s);
      tile_dot(v_tile, grad_out_tile, ld, p.dim, ty, tx, dp);
      float ds[kMicro][kMicro];
#pragma unroll
      for (int i = 0; i < kMicro; ++i) {
#pragma unroll
        for (int j = 0; j < kMicro; ++j) {
          const int query = tx + kSide * j;
          const float query_lse = row_lse[query];
          float z = s[i][j] * p.scale, slope = 1.0f;
          if (p.softcap > 0.0f) {
            z = soft_capped(z, p.softcap);
            slope = soft_cap_slope(z, p.softcap);
          }
          // lse = -inf only for a row that saw no key, which this mask hides anyway.
          const float prob = bit(bits, i, j) && query_lse != -INFINITY ? expf(z - query_lse) : 0.0f;
          ds[i][j] = prob * (dp[i][j] - row_delta[query]) * slope;
          scores[(ty + kSide * i) * kScoreStride + query] = prob;
        }
      }
      __syncthreads();
      tile_product(scores, grad_out_tile, ld, cols, ty, acc_v);  // dV += P^T dO
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kMicro; ++i) {
#pragma unroll
        for (int j = 0; j < kMicro; ++j) scores[(ty + kSide * i) * kScoreStride + tx + kSide * j] = ds[i][j];
      }
      __syncthreads();
      tile_product(scores, q_tile, ld, cols, ty, acc_k);  // dK += dS^T Q (scaled at the end)
      __syncthreads();  // done with the tiles before the next query tile replaces them
    }
  }

  float scale_k[kMicro], one[kMicro];
#pragma unroll
  for (int i = 0; i < kMicro; ++i) {
    scale_k[i] = p.scale;
    one[i] = 1.0f;
  }
  store_rows(grad_k + kv_offset, kv_stride, k_rows, p.dim, ty, tx, acc_k, scale_k);
  store_rows(grad_v + kv_offset, kv_stride, k_rows, p.dim, ty, tx, acc_v, one);
}

// Shared memory: document ids of the query and key tiles, the Q, dO, K and V
// tiles, and the dS tile.
size_t query_gradient_shared_bytes(int dim) {
  return 2 * kTile * sizeof(int64_t) + (4 * kTile * tile_stride(dim) + kTile * kScoreStride) * sizeof(float);
}

template <typename T, int kMaxD>
__global__ void __launch_bounds__(kThreads)
    query_gradient_kernel(const AttentionProblem p, const T* __restrict__ q, const T* __restrict__ k,
                          const T* __restrict__ v, const T* __restrict__ grad_out, const float* __restrict__ lse,
                          const float* __restrict__ delta, T* __restrict__ grad_q) {
  constexpr int kCols = kMaxD / kSide;
  extern __shared__ __align__(16) unsigned char shared[];
  const int ld = tile_stride(p.dim);
  int64_t* q_docs = reinterpret_cast<int64_t*>(shared);
  int64_t* k_docs = q_docs + kTile;
  float* q_tile = reinterpret_cast<float*>(k_docs + kTile);
  float* grad_out_tile = q_tile + kTile * ld;
  float* k_tile = grad_out_tile + kTile * ld;
  float* v_tile = k_tile + kTile * ld;
  float* scores = v_tile + kTile * ld;

  const int tx = static_cast<int>(threadIdx.x) % kSide, ty = static_cast<int>(threadIdx.x) / kSide;
  const int64_t b = blockIdx.x / p.heads;
  const int h = static_cast<int>(blockIdx.x % p.heads), kvh = h / (p.heads / p.kv_heads);
  const int q0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kTile;  // longest causal tiles first
  const int q_rows = min(kTile, p.q_len - q0);
  const int first_query = p.q_offset + q0;
  const int64_t q_stride = int64_t{p.heads} * p.dim, kv_stride = int64_t{p.kv_heads} * p.dim;
  const int64_t q_offset = ((b * p.q_len + q0) * p.heads + h) * p.dim;
  const int64_t kv_head = (b * p.k_len * p.kv_heads + kvh) * p.dim;  // key 0 of kv head kvh
  const int64_t row_head = (b * p.heads + h) * p.q_len + q0;

  load_tile(q + q_offset, q_stride, q_rows, p.dim, q_tile, ld);
  load_tile(grad_out + q_offset, q_stride, q_rows, p.dim, grad_out_tile, ld);
  load_query_documents(p, b, q0, q_rows, q_docs);
  float query_lse[kMicro], query_delta[kMicro];
#pragma unroll
  for (int i = 0; i < kMicro; ++i) {
    const int r = ty + kSide * i;
    query_lse[i] = r < q_rows ? lse[row_head + r] : -INFINITY;
    query_delta[i] = r < q_rows ? delta[row_head + r] : 0.0f;
  }

  int cols[kCols];
  owned_columns(p.dim, tx, cols);
  float acc[kMicro][kCols];
#pragma unroll
  for (int i = 0; i < kMicro; ++i) {
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc[i][j] = 0.0f;
  }

  const TileRange range = key_tiles(p, q0, q_rows);
  for (int kt = range.first; kt < range.end; ++kt) {
    const int k0 = kt * kTile, k_rows = min(kTile, p.k_len - k0);
    load_documents(p, b, k0, k_rows, k_docs);
    __syncthreads();  // k_docs (and on the first pass Q, dO and q_docs) are in place
    const uint32_t bits = visible_bits<true>(p, first_query, q_rows, q_docs, k0, k_rows, k_docs, ty, tx);
    if (__syncthreads_or(bits != 0) == 0) continue;  // the mask hides the whole tile

    load_tile(k + kv_head + k0 * kv_stride, kv_stride, k_rows, p.dim, k_tile, ld);
    load_tile(v + kv_head + k0 * kv_stride, kv_stride, k_rows, p.dim, v_tile, ld);
    __syncthreads();
    float s[kMicro][kMicro] = {}, dp[kMicro][kMicro] = {};
    tile_dot(q_tile, k_tile, ld, p.dim, ty, tx, s);
    tile_dot(grad_out_tile, v_tile, ld, p.dim, ty, tx, dp);
#pragma unroll
    for (int i = 0; i < kMicro; ++i) {
#pragma unroll
      for (int j = 0; j < kMicro; ++j) {
        float z = s[i][j] * p.scale, slope = 1.0f;
        if (p.softcap > 0.0f) {
          z = soft_capped(z, p.softcap);
          slope = soft_cap_slope(z, p.softcap);
        }
        const float prob = bit(bits, i, j) && query_lse[i] != -INFINITY ? expf(z - query_lse[i]) : 0.0f;
        scores[(ty + kSide * i) * kScoreStride + tx + kSide * j] = prob * (dp[i][j] - query_delta[i]) * slope;
      }
    }
    __syncthreads();
    tile_product(scores, k_tile, ld, cols, ty, acc);  // dQ += dS K (scaled at the end)
    // Done with dS, K and V before the next tile replaces them.
    __syncthreads();
  }

  float scale_q[kMicro];
#pragma unroll
  for (int i = 0; i < kMicro; ++i) scale_q[i] = p.scale;
  store_rows(grad_q + q_offset, q_stride, q_rows, p.dim, ty, tx, acc, scale_q);
}

template <typename T, int kMaxD>
cudaError_t launch_backward(const AttentionProblem& p, const void* grad_out, const void* q, const void* k,
                            const void* v, const void* out, const float* lse, float* delta, void* grad_q, void* grad_k,
                            void* grad_v, bool tensor_cores, cudaStream_t stream) {
  const T* q_data = static_cast<const T*>(q);
  const T* k_data = static_cast<const T*>(k);
  const T* v_data = static_cast<const T*>(v);
  const T* grad_out_data = static_cast<const T*>(grad_out);
  const int64_t query_rows = p.batch * p.q_len * p.heads;
  if (query_rows > 0) {
    const auto blocks = static_cast<unsigned>((query_rows + kDeltaRowsPerBlock - 1) / kDeltaRowsPerBlock);
    delta_kernel<T><<<blocks, kThreads, 0, stream>>>(p, grad_out_data, static_cast<const T*>(out), delta);
    if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  }
  if (tensor_cores) {
    return launch_attention_gradients_tensor_core(p, grad_out, q, k, v, lse, delta, grad_q, grad_k, grad_v, stream);
  }

  // Every key gets its dK and dV written, zeros included when no query sees it.
  if (p.batch * p.kv_heads > 0 && p.k_len > 0) {
    const size_t shared = key_gradients_shared_bytes(p.dim);
    const auto kernel = key_gradients_kernel<T, kMaxD>;
    cudaError_t status =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    if (status != cudaSuccess) return status;
    const dim3 grid(static_cast<unsigned>(p.batch * p.kv_heads), static_cast<unsigned>(tiles(p.k_len)));
    kernel<<<grid, kThreads, shared, stream>>>(p, q_data, k_data, v_data, grad_out_data, lse, delta,
                                               static_cast<T*>(grad_k), static_cast<T*>(grad_v));
    if (status = cudaGetLastError(); status != cudaSuccess) return status;
  }

  if (query_rows > 0) {
    const size_t shared = query_gradient_shared_bytes(p.dim);
    const auto kernel = query_gradient_kernel<T, kMaxD>;
    cudaError_t status =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    if (status != cudaSuccess) return status;
    const dim3 grid(static_cast<unsigned>(p.batch * p.heads), static_cast<unsigned>(tiles(p.q_len)));
    kernel<<<grid, kThreads, shared, stream>>>(p, q_data, k_data, v_data, grad_out_data, lse, delta,
                                               static_cast<T*>(grad_q));
    if (status = cudaGetLastError(); status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace
}  // namespace attention

cudaError_t launch_attention_backward(AttentionElement element, const AttentionProblem& problem, const void* grad_out,
                                      const void* q, const void* k, const void* v, const void* out, const float* lse,
                                      float* delta, void* grad_q, void* grad_k, void* grad_v, cudaStream_t stream) {
  const bool tensor_cores = attention_tensor_cores(element, problem, {grad_out, q, k, v, grad_q, grad_k, grad_v});
  return attention::dispatch(element, problem.dim, [&](auto type, auto max_dim) {
    return attention::launch_backward<decltype(type), decltype(max_dim)::value>(
        problem, grad_out, q, k, v, out, lse, delta, grad_q, grad_k, grad_v, tensor_cores, stream);
  });
}

}  // namespace titan::ops::cuda
