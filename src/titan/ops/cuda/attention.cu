// CUDA flash attention: the Tensor plumbing and registration of both
// directions, and the forward kernel on CUDA cores. The entry points
// (ops/attention.cpp) have checked shapes and dtypes and made every input
// contiguous; what is left here are the limits of the CUDA kernels. The
// backward kernels are in attention_backward.cu, the bf16 tensor-core kernels
// (which the launchers pick by themselves) in attention_tensor_core_*.cu, and
// their shared declarations in attention.cuh (in one file they would pass the
// 800 lines a file may have).
//
// The forward kernel, FlashAttention-2 on CUDA cores: one block per (query
// tile of 64 rows, batch * query head). The block keeps its Q tile in shared
// memory and walks the key tiles of its kv head that the mask can reach; per
// tile it forms S = scale * Q K^T, folds S into each row's running max m and
// sum l (online softmax: when m grows, l and the output row are rescaled by
// exp(m_old - m_new)) and adds P V to an f32 accumulator in registers. At the
// end O = acc / l and lse = m + log l; a row that saw no key outputs zeros
// with lse = -inf. With a logit soft cap, S is capped (cap * tanh(S / cap))
// before the mask. Thread layout: attention_tile.cuh.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>

#include "titan/core/copy.h"
#include "titan/core/tensor.h"
#include "titan/ops/attention.h"
#include "titan/ops/cuda/attention.cuh"
#include "titan/ops/cuda/attention_tile.cuh"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace attention {
namespace {

// Shared memory: document ids of the tile's queries and keys, the Q tile, one
// tile for K and then V (they are never needed together), and P.
size_t forward_shared_bytes(int dim) {
  return 2 * kTile * sizeof(int64_t) + (2 * kTile * tile_stride(dim) + kTile * kScoreStride) * sizeof(float);
}

template <typename T, int kMaxD>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(const AttentionProblem p, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   T* __restrict__ out, float* __restrict__ lse) {
  constexpr int kCols = kMaxD / kSide;
  extern __shared__ __align__(16) unsigned char shared[];
  const int ld = tile_stride(p.dim);
  int64_t* q_docs = reinterpret_cast<int64_t*>(shared);
  int64_t* k_docs = q_docs + kTile;
  float* q_tile = reinterpret_cast<float*>(k_docs + kTile);
  float* kv_tile = q_tile + kTile * ld;
  float* scores = kv_tile + kTile * ld;

  const int tx = static_cast<int>(threadIdx.x) % kSide, ty = static_cast<int>(threadIdx.x) / kSide;
  const int64_t b = blockIdx.x / p.heads;
  const int h = static_cast<int>(blockIdx.x % p.heads), kvh = h / (p.heads / p.kv_heads);
  // Causal rows grow with the query index: the longest tiles go first.
  const int q0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kTile;
  const int q_rows = min(kTile, p.q_len - q0);
  const int first_query = p.q_offset + q0;  // absolute position of row 0
  const int64_t q_stride = int64_t{p.heads} * p.dim, kv_stride = int64_t{p.kv_heads} * p.dim;
  const T* k_head = k + (b * p.k_len * p.kv_heads + kvh) * p.dim;
  const T* v_head = v + (b * p.k_len * p.kv_heads + kvh) * p.dim;
  const int64_t q_offset = ((b * p.q_len + q0) * p.heads + h) * p.dim;

  load_tile(q + q_offset, q_stride, q_rows, p.dim, q_tile, ld);
  load_query_documents(p, b, q0, q_rows, q_docs);

  int cols[kCols];
  owned_columns(p.dim, tx, cols);
  float row_max[kMicro], row_sum[kMicro], acc[kMicro][kCols];
#pragma unroll
  for (int i = 0; i < kMicro; ++i) {
    row_max[i] = -INFINITY;
    row_sum[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc[i][j] = 0.0f;
  }

  const bool capped = p.softcap > 0.0f;
  const TileRange range = key_tiles(p, q0, q_rows);
  for (int kt = range.first; kt < range.end; ++kt) {
    const int k0 = kt * kTile, k_rows = min(kTile, p.k_len - k0);
    load_documents(p, b, k0, k_rows, k_docs);
    __syncthreads();  // k_docs (and on the first pass the Q tile and q_docs) are in place
    const uint32_t bits = visible_bits<true>(p, first_query, q_rows, q_docs, k0, k_rows, k_docs, ty, tx);
    if (__syncthreads_or(bits != 0) == 0) continue;  // the mask hides the whole tile

    load_tile(k_head + k0 * kv_stride, kv_stride, k_rows, p.dim, kv_tile, ld);
    __syncthreads();
    float s[kMicro][kMicro] = {};
    tile_dot(q_tile, kv_tile, ld, p.dim, ty, tx, s);
    __syncthreads();  // every thread is done with K before V overwrites it
    load_tile(v_head + k0 * kv_stride, kv_stride, k_rows, p.dim, kv_tile, ld);

#pragma unroll
    for (int i = 0; i < kMicro; ++i) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kMicro; ++j) {
        const float score = s[i][j] * p.scale;
        s[i][j] = bit(bits, i, j) ? (capped ? soft_capped(score, p.softcap) : score) : -INFINITY;
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      tile_max = row_group_max(tile_max);
      const float new_max = fmaxf(row_max[i], tile_max);
      // A row with no visible key so far keeps P = 0: subtracting 0 instead of
      // -inf avoids exp(-inf + inf) = NaN.
      const float base = new_max == -INFINITY ? 0.0f : new_max;
      float tile_sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kMicro; ++j) {
        const float prob = expf(s[i][j] - base);
        scores[(ty + kSide * i) * kScoreStride + tx + kSide * j] = prob;
        tile_sum += prob;
      }
      tile_sum = row_group_sum(tile_sum);
      const float correction = expf(row_max[i] - base);  // 0 while the row had no visible key
      row_sum[i] = row_sum[i] * correction + tile_sum;
      row_max[i] = new_max;
#pragma unroll
      for (int j = 0; j < kCols; ++j) acc[i][j] *= correction;
    }
    __syncthreads();  // P and V are in place
    tile_product(scores, kv_tile, ld, cols, ty, acc);
    __syncthreads();  // done with P and V before the next tile replaces them
  }

  float inverse[kMicro];
#pragma unroll
  for (int i = 0; i < kMicro; ++i) {
    // l >= 1 once any key is visible (the max term contributes exp(0)).
    // A NaN sum (a NaN score) counts as seen: the NaN reaches the output and lse, as on the CPU.
    const bool seen = row_sum[i] != 0.0f;
    inverse[i] = seen ? 1.0f / row_sum[i] : 0.0f;
    const int r = ty + kSide * i;
    if (tx == 0 && r < q_rows) {
      lse[(b * p.heads + h) * p.q_len + q0 + r] = seen ? row_max[i] + logf(row_sum[i]) : -INFINITY;
    }
  }
  store_rows(out + q_offset, q_stride, q_rows, p.dim, ty, tx, acc, inverse);
}

template <typename T, int kMaxD>
cudaError_t launch_forward(const AttentionProblem& p, const void* q, const void* k, const void* v, void* out,
                           float* lse, cudaStream_t stream) {
  const size_t shared = forward_shared_bytes(p.dim);
  const auto kernel = forward_kernel<T, kMaxD>;
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  if (status != cudaSuccess) return status;
  const dim3 grid(static_cast<unsigned>(p.batch * p.heads), static_cast<unsigned>(tiles(p.q_len)));
  kernel<<<grid, kThreads, shared, stream>>>(p, static_cast<const T*>(q), static_cast<const T*>(k),
                                             static_cast<const T*>(v), static_cast<T*>(out), lse);
  return cudaGetLastError();
}

}  // namespace
}  // namespace attention

namespace {

cudaError_t launch_attention_forward(AttentionElement element, const AttentionProblem& problem, const void* q,
                                     const void* k, const void* v, void* out, float* lse, cudaStream_t stream) {
  if (problem.batch * problem.heads == 0 || problem.q_len == 0) return cudaSuccess;
  if (attention_tensor_cores(element, problem, {q, k, v, out})) {
    return launch_attention_forward_tensor_core(problem, q, k, v, out, lse, stream);
  }
  return attention::dispatch(element, problem.dim, [&](auto type, auto max_dim) {
    return attention::launch_forward<decltype(type), decltype(max_dim)::value>(problem, q, k, v, out, lse, stream);
  });
}

AttentionElement element_of(const char* op, const Tensor& q) {
  switch (q.dtype()) {
    case DType::f32:
      return AttentionElement::f32;
    case DType::bf16:
      return AttentionElement::bf16;
    default:
      unsupported_dtype(op, q.device(), q.dtype());
  }
}

AttentionProblem problem_of(const char* op, const Tensor& q, const Tensor& k, const AttentionMask& mask, float scale) {
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), k_len = k.size(1), dim = q.size(3);
  TITAN_CHECK(dim >= 1 && dim <= kAttentionMaxHeadDim, "{}: head dim D = {} is not supported on CUDA (1 <= D <= {})",
              op, dim, kAttentionMaxHeadDim);
  TITAN_CHECK(k_len <= kAttentionMaxLength && q_len <= kAttentionMaxLength,
              "{}: {} queries / {} keys exceed the CUDA kernels' limit of {}", op, q_len, k_len, kAttentionMaxLength);
  // Grids put batch * heads on x, which holds up to 2^31 - 1 blocks.
  TITAN_CHECK(batch * heads <= INT_MAX, "{}: batch {} x {} heads exceeds the CUDA kernels' limit of {}", op, batch,
              heads, INT_MAX);
  const int64_t q_offset = mask.query_offset(q_len, k_len);
  // Positions are ints in the kernels: every query and key position relative to key 0 must fit.
  TITAN_CHECK(q_offset > -int64_t{INT_MAX} / 2 && q_offset < int64_t{INT_MAX} / 2,
              "{}: queries placed {} positions from the keys exceed the CUDA kernels' int positions", op, q_offset);
  AttentionProblem problem;
  problem.q_offset = static_cast<int>(q_offset);
  problem.batch = batch;
  problem.q_len = static_cast<int>(q_len);
  problem.k_len = static_cast<int>(k_len);
  problem.heads = static_cast<int>(heads);
  problem.kv_heads = static_cast<int>(k.size(2));
  problem.dim = static_cast<int>(dim);
  problem.causal = mask.causal;
  // A window longer than the farthest query-key distance (the last query's
  // position relative to key 0) hides nothing, so it is unlimited, and what
  // remains fits the kernels' int positions.
  const int64_t farthest = std::max<int64_t>(0, q_offset + q_len - 1);
  problem.window = mask.sliding_window > farthest ? 0 : static_cast<int>(mask.sliding_window);
  problem.scale = scale;
  problem.softcap = mask.logit_softcap;
  const Tensor& ids = mask.document_ids;
  if (ids.defined()) {
    TITAN_CHECK(ids.device() == q.device(), "{}: document_ids are on {} but q is on {}", op, ids.device().str(),
                q.device().str());
    if (ids.numel() > 0) {
      if (ids.dtype() == DType::i32) {
        problem.doc32 = ids.data<int32_t>();
      } else {
        problem.doc64 = ids.data<int64_t>();
      }
    }
  }
  const Tensor& query_ids = mask.query_document_ids;
  if (query_ids.defined() && query_ids.numel() > 0) {
    TITAN_CHECK(query_ids.device() == q.device(), "{}: query_document_ids are on {} but q is on {}", op,
                query_ids.device().str(), q.device().str());
    if (query_ids.dtype() == DType::i32) {
      problem.q_doc32 = query_ids.data<int32_t>();
    } else {
      problem.q_doc64 = query_ids.data<int64_t>();
    }
  }
  return problem;
}

// Empty tensors may have no memory behind them; the kernels never touch those.
const void* pointer(const Tensor& t) { return t.numel() == 0 ? nullptr : t.data_ptr(); }
void* pointer_mut(const Tensor& t) { return t.numel() == 0 ? nullptr : t.data_ptr(); }
const float* floats(const Tensor& t) { return t.numel() == 0 ? nullptr : t.data<float>(); }
float* floats_mut(const Tensor& t) { return t.numel() == 0 ? nullptr : t.data<float>(); }

void flash_attention_kernel(const AttentionOutput& result, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionMask& mask, float scale) {
  const char* op = "flash_attention";
  const AttentionElement element = element_of(op, q);
  const AttentionProblem problem = problem_of(op, q, k, mask, scale);
  if (q.numel() == 0) return;
  TITAN_CUDA_CHECK(launch_attention_forward(element, problem, pointer(q), pointer(k), pointer(v),
                                            pointer_mut(result.out), floats_mut(result.lse), current_stream()));
}

void flash_attention_backward_kernel(const AttentionGrads& grads, const Tensor& grad_out, const Tensor& q,
                                     const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                                     const AttentionMask& mask, float scale) {
  const char* op = "flash_attention_backward";
  const AttentionElement element = element_of(op, q);
  const AttentionProblem problem = problem_of(op, q, k, mask, scale);
  if (k.numel() == 0) {
    // No keys: no gradient reaches q (it may still have rows when the mask places the queries).
    if (grads.grad_q.numel() > 0) titan::fill_(grads.grad_q, 0.0);
    return;
  }
  // D_i = rowsum(dO_i * O_i), laid out like lse. The stream-ordered allocator
  // may hand this memory out again after we return: only to work queued
  // behind ours on the same stream.
  const Tensor delta = Tensor::empty(lse.shape(), DType::f32, q.device());
  TITAN_CUDA_CHECK(launch_attention_backward(element, problem, pointer(grad_out), pointer(q), pointer(k), pointer(v),
                                             pointer(out), floats(lse), floats_mut(delta), pointer_mut(grads.grad_q),
                                             pointer_mut(grads.grad_k), pointer_mut(grads.grad_v), current_stream()));
}

}  // namespace

void register_attention() {
  flash_attention_kernels.set_kernel(DeviceType::cuda, flash_attention_kernel);
  flash_attention_backward_kernels.set_kernel(DeviceType::cuda, flash_attention_backward_kernel);
}

}  // namespace titan::ops::cuda
