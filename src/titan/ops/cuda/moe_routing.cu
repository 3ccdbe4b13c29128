// CUDA mixture-of-experts routing ops (see ops/moe_routing.h for what each
// computes): kernels, launchers, Tensor plumbing and registration. The entry
// points in ops/moe_routing.cpp have checked shapes and made the operands
// contiguous. T tokens, k slots, the (token, slot) pairs numbered flat as
// token * k + slot.
//
// Nothing here reads device memory back, so a step through these ops can be
// recorded into a CUDA graph. The price: indices outside their range are not
// reported as the CPU kernels report them; they touch no memory out of bounds
// instead (each launcher says what they produce).
//
// The kernels reproduce the CPU kernels (ops/cpu/kernels/moe_routing.cpp) bit
// for bit wherever the CPU's arithmetic is fixed, and say where it is not:
//  - top-k: one warp per row picks the k best in k passes, each pass taking
//    the largest (score, lower column) key below the previous pick. That total
//    order is the CPU's "strictly greater moves up", so no chosen-set is kept.
//  - expert order: CUB's radix sort is stable, so sorting (expert, pair) by
//    expert gives exactly the CPU's counting-sort order; counts come from
//    binary searches in the sorted keys (no atomics, no host read).
//  - sums over a token's slots run in slot order in f32, one thread per output
//    element, as on the CPU. Where the CPU's loop is `sum += w * x`, GCC fuses
//    it into an FMA on its AVX2 / AVX-512 kernel sets but not on the baseline
//    set; the kernels here use fmaf, so they agree bitwise with the former and
//    to a rounding per term with the latter (the tests bound that).
//  - the per-row reductions of the router weights (normalize_rows) run one
//    thread per row in column order, the CPU's order: rows are k long.
#include <cub/cub.cuh>

#include <cstddef>
#include <cstdint>

#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/float_dtype.h"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/moe_routing.h"

namespace titan::ops::cuda {
namespace {

template <typename T>
struct TypeTag {
  using type = T;
};

// Runs launch(TypeTag<T>{}) with T the element type, then reports the launch.
template <typename Launch>
cudaError_t with_float_type(bool bf16, Launch&& launch) {
  if (bf16) {
    launch(TypeTag<__nv_bfloat16>{});
  } else {
    launch(TypeTag<float>{});
  }
  return cudaGetLastError();
}

// ---- top-k ------------------------------------------------------------------

constexpr int kWarpsPerBlock = kThreads / kWarpSize;

// A key whose unsigned order is the CPU's order of (score, column): higher
// score first, equal scores lower column first. -0 and +0 are one score (the
// CPU compares with >); NaN ranks above +inf, as in torch.topk (0xfffffffe,
// so that no key is ~0, the start value of `previous` below). The low word is
// never 0 for a column below 2^32 - 1, so 0 is below every key.
__device__ __forceinline__ unsigned long long rank_key(float score, int64_t column) {
  const uint32_t bits = __float_as_uint(score);
  uint32_t ordered;
  if (score != score) {
    ordered = 0xfffffffeu;
  } else if (score == 0.0f) {
    ordered = 0x80000000u;
  } else {
    ordered = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
  }
  return (static_cast<unsigned long long>(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(column));
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// One warp per row (the row index is warp-uniform, so the shuffles see every lane).
__global__ void topk_rows(float* values, int64_t* indices, const float* scores, int64_t rows, int64_t columns,
                          int64_t k) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize; r < rows; r += warps) {
    const float* row = scores + r * columns;
    unsigned long long previous = ~0ULL;  // above every key: the first pass sees the whole row
    for (int64_t s = 0; s < k; ++s) {
      unsigned long long best = 0;
      for (int64_t c = lane; c < columns; c += kWarpSize) {
        const unsigned long long key = rank_key(row[c], c);
        if (key < previous && key > best) best = key;
      }
      best = warp_max(best);
      const int64_t column = 0xffffffffu - static_cast<uint32_t>(best);
      if (lane == 0) {
        values[r * k + s] = row[column];
        indices[r * k + s] = column;
      }
      previous = best;
    }
  }
}

// ---- expert order -----------------------------------------------------------

// Keys hold experts in [0, experts] (experts marks a bad one, sorting last);
// only the low expert_key_bits(experts) bits are sorted.
int expert_key_bits(int64_t experts) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= experts) ++bits;
  return bits;
}

// The workspace, each piece 256-byte aligned.
struct OrderWorkspace {
  uint32_t* keys_in;
  uint32_t* keys_out;
  int64_t* pairs_in;  // 0, 1, ..., pairs - 1
  void* temp;         // CUB's scratch
  size_t temp_bytes;
  size_t total;
};

OrderWorkspace carve_order_workspace(char* base, int64_t pairs, size_t temp_bytes) {
  size_t offset = 0;
  const auto take = [&](size_t bytes) {
    char* p = base == nullptr ? nullptr : base + offset;
    offset += (bytes + 255) / 256 * 256;
    return p;
  };
  const auto n = static_cast<size_t>(pairs);
  OrderWorkspace w{};
  w.keys_in = reinterpret_cast<uint32_t*>(take(n * sizeof(uint32_t)));
  w.keys_out = reinterpret_cast<uint32_t*>(take(n * sizeof(uint32_t)));
  w.pairs_in = reinterpret_cast<int64_t*>(take(n * sizeof(int64_t)));
  w.temp = take(temp_bytes);
  w.temp_bytes = temp_bytes;
  w.total = offset;
  return w;
}

// The one place the sort is called, for the size query and the run alike, so
// CUB picks the same configuration (and scratch size) both times.
cudaError_t sort_pairs(void* temp, size_t& temp_bytes, const uint32_t* keys_in, uint32_t* keys_out,
                       const int64_t* pairs_in, int64_t* pairs_out, int64_t pairs, int64_t experts,
                       cudaStream_t stream) {
  return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, pairs_in, pairs_out, pairs, 0,
                                         expert_key_bits(experts), stream);
}

__global__ void make_expert_keys(const int64_t* indices, int64_t pairs, int64_t experts, uint32_t* keys,
                                 int64_t* pairs_in) {
  for (int64_t p = first_index(); p < pairs; p += grid_stride()) {
    const int64_t e = indices[p];
    keys[p] = static_cast<uint32_t>(e >= 0 && e < experts ? e : experts);
    pairs_in[p] = p;
  }
}

// The first position of the sorted keys holding a key >= value.
__device__ __forceinline__ int64_t lower_bound(const uint32_t* keys, int64_t n, uint32_t value) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// inverse[order[p]] = p, and each expert's count from where its run of keys starts and ends.
__global__ void finish_expert_order(const int64_t* order, const uint32_t* sorted_keys, int64_t pairs, int64_t experts,
                                    int64_t* inverse, int64_t* counts) {
  const int64_t n = pairs > experts ? pairs : experts;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    if (i < pairs) inverse[order[i]] = i;
    if (i < experts) {
      const auto e = static_cast<uint32_t>(i);
      counts[i] = lower_bound(sorted_keys, pairs, e + 1) - lower_bound(sorted_keys, pairs, e);
    }
  }
}

// ---- moving rows ------------------------------------------------------------

// One block per expert-ordered row copies its token's row in `Unit`s (the
// widest word the row size and alignment allow).
template <typename Unit>
__global__ void permute_rows(Unit* rows, const Unit* x, int64_t units, const int64_t* order, int64_t pairs, int64_t k) {
  for (int64_t p = blockIdx.x; p < pairs; p += gridDim.x) {
    const Unit* src = x + (order[p] / k) * units;
    Unit* dst = rows + p * units;
    for (int64_t c = threadIdx.x; c < units; c += blockDim.x) dst[c] = src[c];
  }
}

template <typename Unit>
cudaError_t permute_in_units(void* rows, const void* x, int64_t row_bytes, const int64_t* order, int64_t pairs,
                             int64_t k, cudaStream_t stream) {
  const int64_t units = row_bytes / static_cast<int64_t>(sizeof(Unit));
  permute_rows<<<row_blocks(pairs), threads_for(units), 0, stream>>>(
      static_cast<Unit*>(rows), static_cast<const Unit*>(x), units, order, pairs, k);
  return cudaGetLastError();
}

// One block per token; each thread sums one column over the token's slots in slot order.
template <typename T>
__global__ void unpermute_sum_rows(T* grad_x, const T* grad_rows, const int64_t* inverse, int64_t tokens, int64_t k,
                                   int64_t dim) {
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float sum = 0.0f;
      for (int64_t s = 0; s < k; ++s) sum += load_f32(grad_rows, inverse[t * k + s] * dim + d);
      store_f32(grad_x, t * dim + d, sum);
    }
  }
}

template <typename T>
__global__ void combine_rows(T* out, const T* rows, const int64_t* inverse, const float* weights, int64_t tokens,
                             int64_t k, int64_t dim) {
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float sum = 0.0f;
      for (int64_t s = 0; s < k; ++s) {
        sum = fmaf(weights[t * k + s], load_f32(rows, inverse[t * k + s] * dim + d), sum);
      }
      store_f32(out, t * dim + d, sum);
    }
  }
}

// One block per token: for each slot, the scaled gradient row and the dot
// product of the token's gradient with the slot's expert output (a block sum
// whose order is fixed by the block shape: run-to-run identical).
template <typename T>
__global__ void combine_rows_backward(T* grad_rows, float* grad_weights, const T* grad_out, const T* rows,
                                      const int64_t* inverse, const float* weights, int64_t tokens, int64_t k,
                                      int64_t dim) {
  __shared__ float scratch[kWarpSize];
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t at = inverse[t * k + s];
      const float w = weights[t * k + s];
      float dot = 0.0f;
      for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
        const float g = load_f32(grad_out, t * dim + d);
        store_f32(grad_rows, at * dim + d, __fmul_rn(w, g));  // one rounding, as the CPU's w * g
        dot = fmaf(g, load_f32(rows, at * dim + d), dot);
      }
      dot = block_sum(dot, scratch);
      if (threadIdx.x == 0) grad_weights[t * k + s] = dot;
    }
  }
}

// ---- router weights ---------------------------------------------------------

__global__ void gather_columns_kernel(float* out, const float* x, const int64_t* indices, int64_t rows, int64_t columns,
                                      int64_t k) {
  for (int64_t i = first_index(); i < rows * k; i += grid_stride()) {
    const int64_t c = indices[i];
    out[i] = c >= 0 && c < columns ? x[(i / k) * columns + c] : __int_as_float(0x7fc00000);
  }
}

// One thread per row, slots in order: a repeated column adds its gradients in
// slot order, as on the CPU, without atomics.
__global__ void scatter_columns_kernel(float* out, const float* grad, const int64_t* indices, int64_t rows,
                                       int64_t columns, int64_t k) {
  for (int64_t r = first_index(); r < rows; r += grid_stride()) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t c = indices[r * k + s];
      if (c >= 0 && c < columns) out[r * columns + c] += grad[r * k + s];
    }
  }
}

__device__ __forceinline__ float row_sum(const float* row, int64_t columns) {
  float sum = 0.0f;
  for (int64_t c = 0; c < columns; ++c) sum += row[c];
  return sum;
}

__global__ void normalize_rows_kernel(float* out, const float* x, int64_t rows, int64_t columns) {
  for (int64_t r = first_index(); r < rows; r += grid_stride()) {
    const float* src = x + r * columns;
    float* dst = out + r * columns;
    const float sum = row_sum(src, columns);
    for (int64_t c = 0; c < columns; ++c) dst[c] = sum == 0.0f ? 0.0f : src[c] / sum;
  }
}

// y = x / s with s = sum(x): dx_i = (g_i - sum_j g_j y_j) / s.
__global__ void normalize_rows_backward_kernel(float* grad_x, const float* grad_out, const float* x, int64_t rows,
                                               int64_t columns) {
  for (int64_t r = first_index(); r < rows; r += grid_stride()) {
    const float* src = x + r * columns;
    const float* g = grad_out + r * columns;
    float* dst = grad_x + r * columns;
    const float sum = row_sum(src, columns);
    if (sum == 0.0f) {
      for (int64_t c = 0; c < columns; ++c) dst[c] = 0.0f;
      continue;
    }
    float weighted = 0.0f;
    for (int64_t c = 0; c < columns; ++c) weighted = fmaf(g[c], src[c] / sum, weighted);
    for (int64_t c = 0; c < columns; ++c) dst[c] = (g[c] - weighted) / sum;
  }
}

// The accurate expf (not __expf), as the elementwise kernels: within a few
// ulp of the CPU's polynomial exp.
template <typename T>
__global__ void sigmoid_kernel(T* y, const T* x, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) store_f32(y, i, 1.0f / (1.0f + expf(-load_f32(x, i))));
}

// g * y * (1 - y), rounded as the CPU rounds it: (g * y) first, then times (1 - y).
template <typename T>
__global__ void sigmoid_backward_kernel(T* grad_x, const T* grad_out, const T* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float s = load_f32(y, i);
    store_f32(grad_x, i, __fmul_rn(__fmul_rn(load_f32(grad_out, i), s), __fsub_rn(1.0f, s)));
  }
}

// values, indices [rows, k]: the k largest of each row of scores [rows,
// columns], descending, equal scores lower column first (columns < 2^32 - 1).
// NaN ranks below every number (the CPU kernel's order for NaN rows differs).
cudaError_t launch_topk(float* values, int64_t* indices, const float* scores, int64_t rows, int64_t columns, int64_t k,
                        cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  topk_rows<<<grid_for(rows, kWarpsPerBlock), kThreads, 0, stream>>>(values, indices, scores, rows, columns, k);
  return cudaGetLastError();
}

// ---- group-limited routing ---------------------------------------------------

// NaN ranks above every number, as in topk_rows and the CPU kernel.
__device__ __forceinline__ bool group_ranks_above(float a, float b) { return a != a ? b == b : a > b; }

// One thread per token: the arithmetic of the CPU kernel (ops/cpu/kernels/moe_routing.cpp).
__global__ void limit_rows_to_groups(float* out, const float* choice, int64_t rows, int64_t experts, int64_t groups,
                                     int64_t kept) {
  const int64_t per_group = experts / groups;
  for (int64_t r = first_index(); r < rows; r += grid_stride()) {
    const float* row = choice + r * experts;
    float score[kMaxExpertGroups];
    unsigned long long taken = 0;
    for (int64_t g = 0; g < groups; ++g) {
      float best = -INFINITY, second = -INFINITY;
      for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
        if (group_ranks_above(row[e], best)) {
          second = best;
          best = row[e];
        } else if (group_ranks_above(row[e], second)) {
          second = row[e];
        }
      }
      score[g] = best + second;
    }
    for (int64_t pass = 0; pass < kept; ++pass) {
      int64_t pick = -1;
      for (int64_t g = 0; g < groups; ++g) {
        const bool free = ((taken >> g) & 1ULL) == 0;
        if (free && (pick < 0 || group_ranks_above(score[g], score[pick]))) pick = g;
      }
      taken |= 1ULL << pick;
    }
    for (int64_t e = 0; e < experts; ++e) out[r * experts + e] = ((taken >> (e / per_group)) & 1ULL) ? row[e] : 0.0f;
  }
}

// Bytes of device workspace launch_expert_order needs.
cudaError_t expert_order_workspace(int64_t pairs, int64_t experts, size_t* bytes) {
  size_t temp_bytes = 0;
  const cudaError_t status = sort_pairs(nullptr, temp_bytes, nullptr, nullptr, nullptr, nullptr, pairs, experts, 0);
  *bytes = carve_order_workspace(nullptr, pairs, temp_bytes).total;
  return status;
}

// A stable sort of the pairs by expert: order [pairs], inverse [pairs] and
// counts [experts] from indices [pairs] (experts < 2^32 - 1). A pair whose
// expert is outside [0, experts) sorts after every expert and is in no count.
cudaError_t launch_expert_order(int64_t* order, int64_t* inverse, int64_t* counts, const int64_t* indices,
                                int64_t pairs, int64_t experts, void* workspace, size_t workspace_bytes,
                                cudaStream_t stream) {
  if (pairs == 0) return cudaMemsetAsync(counts, 0, static_cast<size_t>(experts) * sizeof(int64_t), stream);
  size_t temp_bytes = 0;
  cudaError_t status = sort_pairs(nullptr, temp_bytes, nullptr, nullptr, nullptr, nullptr, pairs, experts, stream);
  if (status != cudaSuccess) return status;
  const OrderWorkspace w = carve_order_workspace(static_cast<char*>(workspace), pairs, temp_bytes);
  if (w.total > workspace_bytes) return cudaErrorInvalidValue;
  make_expert_keys<<<grid_for(pairs, kThreads), kThreads, 0, stream>>>(indices, pairs, experts, w.keys_in, w.pairs_in);
  if ((status = cudaGetLastError()) != cudaSuccess) return status;
  temp_bytes = w.temp_bytes;
  status = sort_pairs(w.temp, temp_bytes, w.keys_in, w.keys_out, w.pairs_in, order, pairs, experts, stream);
  if (status != cudaSuccess) return status;
  const int64_t n = pairs > experts ? pairs : experts;
  finish_expert_order<<<grid_for(n, kThreads), kThreads, 0, stream>>>(order, w.keys_out, pairs, experts, inverse,
                                                                      counts);
  return cudaGetLastError();
}

// rows[p] = x[order[p] / k], rows of row_bytes bytes (any dtype).
cudaError_t launch_permute_tokens(void* rows, const void* x, int64_t row_bytes, const int64_t* order, int64_t pairs,
                                  int64_t k, cudaStream_t stream) {
  if (pairs == 0 || row_bytes == 0) return cudaSuccess;
  const auto fits = [&](size_t unit) {
    return row_bytes % static_cast<int64_t>(unit) == 0 && reinterpret_cast<uintptr_t>(rows) % unit == 0 &&
           reinterpret_cast<uintptr_t>(x) % unit == 0;
  };
  if (fits(16)) return permute_in_units<uint4>(rows, x, row_bytes, order, pairs, k, stream);
  if (fits(8)) return permute_in_units<uint2>(rows, x, row_bytes, order, pairs, k, stream);
  if (fits(4)) return permute_in_units<uint32_t>(rows, x, row_bytes, order, pairs, k, stream);
  if (fits(2)) return permute_in_units<uint16_t>(rows, x, row_bytes, order, pairs, k, stream);
  return permute_in_units<uint8_t>(rows, x, row_bytes, order, pairs, k, stream);
}

// grad_x[t] = sum over s of grad_rows[inverse[t*k + s]]; [tokens, dim], f32 or bf16.
cudaError_t launch_unpermute_sum(void* grad_x, const void* grad_rows, bool bf16, const int64_t* inverse, int64_t tokens,
                                 int64_t k, int64_t dim, cudaStream_t stream) {
  if (tokens == 0 || dim == 0) return cudaSuccess;
  return with_float_type(bf16, [&](auto tag) {
    using T = typename decltype(tag)::type;
    unpermute_sum_rows<<<row_blocks(tokens), threads_for(dim), 0, stream>>>(
        static_cast<T*>(grad_x), static_cast<const T*>(grad_rows), inverse, tokens, k, dim);
  });
}

// out[t] = sum over s of weights[t, s] * rows[inverse[t*k + s]]; out and rows f32 or bf16.
cudaError_t launch_combine_experts(void* out, const void* rows, bool bf16, const int64_t* inverse, const float* weights,
                                   int64_t tokens, int64_t k, int64_t dim, cudaStream_t stream) {
  if (tokens == 0 || dim == 0) return cudaSuccess;
  return with_float_type(bf16, [&](auto tag) {
    using T = typename decltype(tag)::type;
    combine_rows<<<row_blocks(tokens), threads_for(dim), 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(rows),
                                                                      inverse, weights, tokens, k, dim);
  });
}

// grad_rows[inverse[t*k + s]] = weights[t, s] * grad_out[t];
// grad_weights[t, s] = <grad_out[t], rows[inverse[t*k + s]]>.
cudaError_t launch_combine_experts_backward(void* grad_rows, float* grad_weights, const void* grad_out,
                                            const void* rows, bool bf16, const int64_t* inverse, const float* weights,
                                            int64_t tokens, int64_t k, int64_t dim, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  return with_float_type(bf16, [&](auto tag) {
    using T = typename decltype(tag)::type;
    combine_rows_backward<<<row_blocks(tokens), threads_for(dim), 0, stream>>>(
        static_cast<T*>(grad_rows), grad_weights, static_cast<const T*>(grad_out), static_cast<const T*>(rows), inverse,
        weights, tokens, k, dim);
  });
}

// out[t, s] = x[t, indices[t, s]] for x [rows, columns]; NaN for a column
// outside [0, columns).
cudaError_t launch_gather_columns(float* out, const float* x, const int64_t* indices, int64_t rows, int64_t columns,
                                  int64_t k, cudaStream_t stream) {
  if (rows * k == 0) return cudaSuccess;
  gather_columns_kernel<<<grid_for(rows * k, kThreads), kThreads, 0, stream>>>(out, x, indices, rows, columns, k);
  return cudaGetLastError();
}

// out[t, indices[t, s]] += grad[t, s] into a zeroed out [rows, columns], slot
// by slot (a column chosen twice gets both); a column outside the row is skipped.
cudaError_t launch_scatter_columns(float* out, const float* grad, const int64_t* indices, int64_t rows, int64_t columns,
                                   int64_t k, cudaStream_t stream) {
  if (rows * k == 0) return cudaSuccess;
  scatter_columns_kernel<<<grid_for(rows, kThreads), kThreads, 0, stream>>>(out, grad, indices, rows, columns, k);
  return cudaGetLastError();
}

// out[r] = x[r] / sum(x[r]) (0 where the sum is 0), and its backward.
cudaError_t launch_normalize_rows(float* out, const float* x, int64_t rows, int64_t columns, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  normalize_rows_kernel<<<grid_for(rows, kThreads), kThreads, 0, stream>>>(out, x, rows, columns);
  return cudaGetLastError();
}

cudaError_t launch_normalize_rows_backward(float* grad_x, const float* grad_out, const float* x, int64_t rows,
                                           int64_t columns, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  normalize_rows_backward_kernel<<<grid_for(rows, kThreads), kThreads, 0, stream>>>(grad_x, grad_out, x, rows, columns);
  return cudaGetLastError();
}

// y = 1 / (1 + exp(-x)) and grad_x = grad_out * y * (1 - y); n elements, f32 or bf16.
cudaError_t launch_sigmoid(void* y, const void* x, bool bf16, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_float_type(bf16, [&](auto tag) {
    using T = typename decltype(tag)::type;
    sigmoid_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), n);
  });
}

cudaError_t launch_sigmoid_backward(void* grad_x, const void* grad_out, const void* y, bool bf16, int64_t n,
                                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return with_float_type(bf16, [&](auto tag) {
    using T = typename decltype(tag)::type;
    sigmoid_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(grad_x), static_cast<const T*>(grad_out), static_cast<const T*>(y), n);
  });
}

// The kernels' keys hold a column or expert below 2^32 - 1 (the top value is the "none" mark).
constexpr int64_t kMaxKeyedRange = int64_t{0xffffffff} - 1;

void topk_kernel(const Tensor& values, const Tensor& indices, const Tensor& scores) {
  const int64_t columns = scores.size(1);
  TITAN_CHECK(columns <= kMaxKeyedRange, "topk on {}: rows of {} columns are too long", scores.device().str(), columns);
  TITAN_CUDA_CHECK(launch_topk(values.data<float>(), indices.data<int64_t>(), scores.data<float>(), scores.size(0),
                               columns, values.size(1), current_stream()));
}

void limit_to_groups_kernel(const Tensor& out, const Tensor& choice, int64_t groups, int64_t kept) {
  const int64_t rows = choice.size(0);
  limit_rows_to_groups<<<grid_for(rows, kThreads), kThreads, 0, current_stream()>>>(
      out.data<float>(), choice.data<float>(), rows, choice.size(1), groups, kept);
  TITAN_CUDA_CHECK(cudaGetLastError());
}

void expert_order_kernel(const Tensor& order, const Tensor& inverse, const Tensor& counts, const Tensor& indices) {
  const int64_t pairs = indices.numel(), experts = counts.numel();
  TITAN_CHECK(experts <= kMaxKeyedRange, "expert_order on {}: {} experts are too many", indices.device().str(),
              experts);
  size_t bytes = 0;
  TITAN_CUDA_CHECK(expert_order_workspace(pairs, experts, &bytes));
  const Tensor workspace = Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, indices.device());
  TITAN_CUDA_CHECK(launch_expert_order(order.data<int64_t>(), inverse.data<int64_t>(), counts.data<int64_t>(),
                                       indices.data<int64_t>(), pairs, experts, workspace.data_ptr(), bytes,
                                       current_stream()));
}

void permute_tokens_kernel(const Tensor& rows, const Tensor& x, const Tensor& order, int64_t k) {
  TITAN_CUDA_CHECK(launch_permute_tokens(rows.data_ptr(), x.data_ptr(),
                                         x.size(1) * static_cast<int64_t>(x.element_size()), order.data<int64_t>(),
                                         rows.size(0), k, current_stream()));
}

void unpermute_sum_kernel(const Tensor& grad_x, const Tensor& grad_rows, const Tensor& inverse, int64_t k) {
  const bool bf16 = is_bf16("unpermute_sum", grad_rows);
  TITAN_CUDA_CHECK(launch_unpermute_sum(grad_x.data_ptr(), grad_rows.data_ptr(), bf16, inverse.data<int64_t>(),
                                        grad_x.size(0), k, grad_x.size(1), current_stream()));
}

void combine_experts_kernel(const Tensor& out, const Tensor& rows, const Tensor& inverse, const Tensor& weights) {
  const bool bf16 = is_bf16("combine_experts", rows);
  TITAN_CUDA_CHECK(launch_combine_experts(out.data_ptr(), rows.data_ptr(), bf16, inverse.data<int64_t>(),
                                          weights.data<float>(), weights.size(0), weights.size(1), rows.size(1),
                                          current_stream()));
}

void combine_experts_backward_kernel(const Tensor& grad_rows, const Tensor& grad_weights, const Tensor& grad_out,
                                     const Tensor& rows, const Tensor& inverse, const Tensor& weights) {
  const bool bf16 = is_bf16("combine_experts_backward", rows);
  TITAN_CUDA_CHECK(launch_combine_experts_backward(grad_rows.data_ptr(), grad_weights.data<float>(),
                                                   grad_out.data_ptr(), rows.data_ptr(), bf16, inverse.data<int64_t>(),
                                                   weights.data<float>(), weights.size(0), weights.size(1),
                                                   rows.size(1), current_stream()));
}

void gather_columns_kernel(const Tensor& out, const Tensor& x, const Tensor& indices) {
  TITAN_CUDA_CHECK(launch_gather_columns(out.data<float>(), x.data<float>(), indices.data<int64_t>(), x.size(0),
                                         x.size(1), indices.size(1), current_stream()));
}

void scatter_columns_kernel(const Tensor& out, const Tensor& grad, const Tensor& indices) {
  TITAN_CUDA_CHECK(launch_scatter_columns(out.data<float>(), grad.data<float>(), indices.data<int64_t>(), out.size(0),
                                          out.size(1), indices.size(1), current_stream()));
}

void normalize_rows_kernel(const Tensor& out, const Tensor& x) {
  TITAN_CUDA_CHECK(launch_normalize_rows(out.data<float>(), x.data<float>(), x.size(0), x.size(1), current_stream()));
}

void normalize_rows_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x) {
  TITAN_CUDA_CHECK(launch_normalize_rows_backward(grad_x.data<float>(), grad_out.data<float>(), x.data<float>(),
                                                  x.size(0), x.size(1), current_stream()));
}

void sigmoid_kernel(const Tensor& y, const Tensor& x) {
  const bool bf16 = is_bf16("sigmoid", x);
  TITAN_CUDA_CHECK(launch_sigmoid(y.data_ptr(), x.data_ptr(), bf16, x.numel(), current_stream()));
}

void sigmoid_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y) {
  const bool bf16 = is_bf16("sigmoid_backward", y);
  TITAN_CUDA_CHECK(
      launch_sigmoid_backward(grad_x.data_ptr(), grad_out.data_ptr(), y.data_ptr(), bf16, y.numel(), current_stream()));
}

}  // namespace

void register_moe_routing() {
  topk_kernels.set_kernel(DeviceType::cuda, topk_kernel);
  limit_to_groups_kernels.set_kernel(DeviceType::cuda, limit_to_groups_kernel);
  expert_order_kernels.set_kernel(DeviceType::cuda, expert_order_kernel);
  permute_tokens_kernels.set_kernel(DeviceType::cuda, permute_tokens_kernel);
  unpermute_sum_kernels.set_kernel(DeviceType::cuda, unpermute_sum_kernel);
  combine_experts_kernels.set_kernel(DeviceType::cuda, combine_experts_kernel);
  combine_experts_backward_kernels.set_kernel(DeviceType::cuda, combine_experts_backward_kernel);
  gather_columns_kernels.set_kernel(DeviceType::cuda, gather_columns_kernel);
  scatter_columns_kernels.set_kernel(DeviceType::cuda, scatter_columns_kernel);
  normalize_rows_kernels.set_kernel(DeviceType::cuda, normalize_rows_kernel);
  normalize_rows_backward_kernels.set_kernel(DeviceType::cuda, normalize_rows_backward_kernel);
  sigmoid_kernels.set_kernel(DeviceType::cuda, sigmoid_kernel);
  sigmoid_backward_kernels.set_kernel(DeviceType::cuda, sigmoid_backward_kernel);
}

}  // namespace titan::ops::cuda
