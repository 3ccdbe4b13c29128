// CUDA gated delta rule (ops/delta_rule.h), forward and backward: the
// per-(batch, head) recurrence here, and the chunked algorithm in
// delta_rule_chunked.cu, which runs when options ask for it and the shape fits
// its limits (chunks of up to 64 tokens, head dims up to 128); otherwise the
// recurrence computes the same function.
//
// The recurrence:
// The state's columns evolve independently (column j of S sees only v_j), so
// a block is one warp owning kCols = 32 columns of one (batch, value head)
// state, held in shared memory [Dk][32] (Dk <= 128), one column per lane;
// the q and k rows of each token are shared by the warp. Grid: (B * Hv,
// ceil(Dv / 32)).
//
// Packed documents: at a document's first token the state before it counts
// as zero (forward) and receives no gradient (backward).
//
// Backward: each block stores its state at every chunk_size-th token in
// scratch, then per segment in reverse recomputes the segment's states (in
// scratch) and walks back through them, as the CPU recurrent backward does.
// dq' and dk' (of the scaled, normalised rows), dg and dbeta sum over the
// state's columns: each block writes its 32 columns' share to scratch, and two
// small kernels add the shares in a fixed order (no atomics: run-to-run
// identical), the q/k one also over the value heads sharing a key head, then
// through the l2norm's chain rule.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "titan/core/dtype.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/delta_rule_chunked.cuh"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/delta_rule.h"

namespace titan::ops::cuda {
namespace {

constexpr int kCols = 32;
constexpr int kMaxKeyDim = 128;
constexpr int kRedStride = kCols + 1;  // padded rows: a lane summing one row reads 32 different banks

struct DeltaRuleArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* g;
  const void* beta;
  const float* initial_state;  // null: zeros
  const void* document_ids;    // [B, T] i32 or i64; null: one stream
  bool ids_i64;
  bool qkv_bf16, g_bf16, beta_bf16;
  int64_t tokens, key_heads, value_heads, dk, dv, segment;
  float scale, eps;
  bool normalize;
};

__device__ __forceinline__ float load_any(const void* p, bool bf16, int64_t i) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void store_any(void* p, bool bf16, int64_t i, float v) {
  if (bf16)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}

// Where one block's (batch, value head, column tile) reads and writes.
struct DeltaRuleBlock {
  int64_t b, hv, hk, j;
  int lane;
  bool active;
  __device__ DeltaRuleBlock(const DeltaRuleArgs& a) {
    b = blockIdx.x / a.value_heads;
    hv = blockIdx.x % a.value_heads;
    hk = hv / (a.value_heads / a.key_heads);
    lane = threadIdx.x;
    j = static_cast<int64_t>(blockIdx.y) * kCols + lane;
    active = j < a.dv;
  }
  __device__ int64_t qk_offset(const DeltaRuleArgs& a, int64_t t) const {
    return ((b * a.tokens + t) * a.key_heads + hk) * a.dk;
  }
  __device__ int64_t gate_index(const DeltaRuleArgs& a, int64_t t) const {
    return (b * a.tokens + t) * a.value_heads + hv;
  }
  __device__ int64_t state_index(const DeltaRuleArgs& a, int64_t i) const {
    return ((b * a.value_heads + hv) * a.dk + i) * a.dv + j;
  }
  // 0 where token t starts a new document (the state before it counts as zero), else 1.
  __device__ float keep(const DeltaRuleArgs& a, int64_t t) const {
    if (a.document_ids == nullptr || t == 0) return 1.0f;
    const int64_t at = b * a.tokens + t;
    const bool restart =
        a.ids_i64
            ? static_cast<const int64_t*>(a.document_ids)[at] != static_cast<const int64_t*>(a.document_ids)[at - 1]
            : static_cast<const int32_t*>(a.document_ids)[at] != static_cast<const int32_t*>(a.document_ids)[at - 1];
    return restart ? 0.0f : 1.0f;
  }
};

// row = factor * x / sqrt(|x|^2 + eps) (or factor * x), one warp, into shared memory.
__device__ void load_qk_row(const DeltaRuleArgs& a, const void* x, int64_t offset, float factor, float* row) {
  float sum_squares = 0.0f;
  for (int64_t i = threadIdx.x; i < a.dk; i += kCols) {
    const float value = load_any(x, a.qkv_bf16, offset + i);
    row[i] = value;
    sum_squares += value * value;
  }
  sum_squares = warp_sum(sum_squares);
  const float f = a.normalize ? factor / sqrtf(sum_squares + a.eps) : factor;
  for (int64_t i = threadIdx.x; i < a.dk; i += kCols) row[i] *= f;
  __syncwarp();
}

// One token on this lane's column (state rows at stride `stride`), the state
// before it times `keep` (0 at a document's first token); returns o_j when q is given.
__device__ float delta_rule_column_step(const float* prev, float* next, int64_t stride, const float* q, const float* k,
                                        int64_t dk, float v, float decay, float beta, float keep) {
  decay *= keep;
  float kv = 0.0f;
  for (int64_t i = 0; i < dk; ++i) kv += prev[i * stride] * k[i];
  const float delta = beta * (v - decay * kv);
  float o = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    const float s = decay * prev[i * stride] + k[i] * delta;
    next[i * stride] = s;
    if (q != nullptr) o += q[i] * s;
  }
  return o;
}

__global__ void delta_rule_forward_kernel(DeltaRuleArgs a, void* out, float* final_state) {
  __shared__ float state[kMaxKeyDim * kCols];
  __shared__ float q[kMaxKeyDim], k[kMaxKeyDim];
  const DeltaRuleBlock blk(a);
  for (int64_t i = 0; i < a.dk; ++i)
    state[i * kCols + blk.lane] =
        blk.active && a.initial_state != nullptr ? a.initial_state[blk.state_index(a, i)] : 0.0f;
  for (int64_t t = 0; t < a.tokens; ++t) {
    load_qk_row(a, a.q, blk.qk_offset(a, t), a.scale, q);
    load_qk_row(a, a.k, blk.qk_offset(a, t), 1.0f, k);
    const int64_t gate = blk.gate_index(a, t);
    const float decay = expf(load_any(a.g, a.g_bf16, gate)), beta = load_any(a.beta, a.beta_bf16, gate);
    if (blk.active) {
      const float v = load_any(a.v, a.qkv_bf16, gate * a.dv + blk.j);
      const float o =
          delta_rule_column_step(state + blk.lane, state + blk.lane, kCols, q, k, a.dk, v, decay, beta, blk.keep(a, t));
      store_any(out, a.qkv_bf16, gate * a.dv + blk.j, o);
    }
    __syncwarp();  // before the next token's rows replace q and k
  }
  if (blk.active)
    for (int64_t i = 0; i < a.dk; ++i) final_state[blk.state_index(a, i)] = state[i * kCols + blk.lane];
}

// Sums red[i][0..31] for every row i into dst[i] (lane i, i + 32, ...).
__device__ void reduce_rows(const float* red, float* dst, int64_t dk) {
  __syncwarp();
  for (int64_t i = threadIdx.x; i < dk; i += kCols) {
    float sum = 0.0f;
    for (int c = 0; c < kCols; ++c) sum += red[i * kRedStride + c];
    dst[i] = sum;
  }
  __syncwarp();
}

struct DeltaRuleGradArgs {
  const void* grad_out;
  const float* grad_final_state;  // null: zeros
  void* grad_v;
  float* grad_initial_state;  // null: not wanted
  float* checkpoints;         // [blocks][segments][Dk][32]
  float* segment_states;      // [blocks][segment + 1][Dk][32]
  float* partial_qk;          // [tiles][2][B * T * Hv][Dk]
  float* partial_gate;        // [tiles][B * T * Hv][2]: dg, dbeta
  int64_t rows;               // B * T * Hv
};

__global__ void delta_rule_backward_kernel(DeltaRuleArgs a, DeltaRuleGradArgs d) {
  __shared__ float d_state[kMaxKeyDim * kCols];
  __shared__ float red[kMaxKeyDim * kRedStride];
  __shared__ float q[kMaxKeyDim], k[kMaxKeyDim];
  const DeltaRuleBlock blk(a);
  const int64_t block = static_cast<int64_t>(blockIdx.x) * gridDim.y + blockIdx.y, tile = blockIdx.y;
  const int64_t segments = (a.tokens + a.segment - 1) / a.segment, state_size = a.dk * kCols;
  float* checkpoints = d.checkpoints + block * segments * state_size;
  float* states = d.segment_states + block * (a.segment + 1) * state_size;
  const int lane = blk.lane;
  for (int64_t i = 0; i < a.dk; ++i)
    checkpoints[i * kCols + lane] =
        blk.active && a.initial_state != nullptr ? a.initial_state[blk.state_index(a, i)] : 0.0f;
  for (int64_t s = 0; s + 1 < segments; ++s) {
    float* next = checkpoints + (s + 1) * state_size;
    for (int64_t i = 0; i < a.dk; ++i) next[i * kCols + lane] = checkpoints[s * state_size + i * kCols + lane];
    for (int64_t t = s * a.segment; t < (s + 1) * a.segment; ++t) {
      load_qk_row(a, a.k, blk.qk_offset(a, t), 1.0f, k);
      const int64_t gate = blk.gate_index(a, t);
      const float v = blk.active ? load_any(a.v, a.qkv_bf16, gate * a.dv + blk.j) : 0.0f;
      delta_rule_column_step(next + lane, next + lane, kCols, nullptr, k, a.dk, v, expf(load_any(a.g, a.g_bf16, gate)),
                             load_any(a.beta, a.beta_bf16, gate), blk.keep(a, t));
      __syncwarp();
    }
  }
  for (int64_t i = 0; i < a.dk; ++i)
    d_state[i * kCols + lane] =
        blk.active && d.grad_final_state != nullptr ? d.grad_final_state[blk.state_index(a, i)] : 0.0f;
  float* partial_q = d.partial_qk + tile * 2 * d.rows * a.dk;
  float* partial_k = partial_q + d.rows * a.dk;
  float* partial_gate = d.partial_gate + tile * d.rows * 2;
  for (int64_t s = segments - 1; s >= 0; --s) {
    const int64_t t0 = s * a.segment, n = a.tokens - t0 < a.segment ? a.tokens - t0 : a.segment;
    for (int64_t i = 0; i < a.dk; ++i) states[i * kCols + lane] = checkpoints[s * state_size + i * kCols + lane];
    for (int64_t t = 0; t < n; ++t) {
      load_qk_row(a, a.k, blk.qk_offset(a, t0 + t), 1.0f, k);
      const int64_t gate = blk.gate_index(a, t0 + t);
      const float v = blk.active ? load_any(a.v, a.qkv_bf16, gate * a.dv + blk.j) : 0.0f;
      delta_rule_column_step(states + t * state_size + lane, states + (t + 1) * state_size + lane, kCols, nullptr, k,
                             a.dk, v, expf(load_any(a.g, a.g_bf16, gate)), load_any(a.beta, a.beta_bf16, gate),
                             blk.keep(a, t0 + t));
      __syncwarp();
    }
    for (int64_t t = n - 1; t >= 0; --t) {
      const float* prev = states + t * state_size + lane;
      const float* next = states + (t + 1) * state_size + lane;
      load_qk_row(a, a.q, blk.qk_offset(a, t0 + t), a.scale, q);
      load_qk_row(a, a.k, blk.qk_offset(a, t0 + t), 1.0f, k);
      const int64_t gate = blk.gate_index(a, t0 + t);
      const float decay = expf(load_any(a.g, a.g_bf16, gate)), beta = load_any(a.beta, a.beta_bf16, gate);
      // At a document's first token the state before it is zero and gets no gradient.
      const float keep = blk.keep(a, t0 + t);
      const float v = blk.active ? load_any(a.v, a.qkv_bf16, gate * a.dv + blk.j) : 0.0f;
      const float d_out = blk.active ? load_any(d.grad_out, a.qkv_bf16, gate * a.dv + blk.j) : 0.0f;
      float* ds = d_state + lane;
      // o = next^T q: dq_i = sum_j next[i][j] dO_j; dS += q dO^T.
      for (int64_t i = 0; i < a.dk; ++i) {
        red[i * kRedStride + lane] = next[i * kCols] * d_out;
        ds[i * kCols] += q[i] * d_out;
      }
      reduce_rows(red, partial_q + gate * a.dk, a.dk);
      float kv = 0.0f, e = 0.0f;
      for (int64_t i = 0; i < a.dk; ++i) {
        kv += keep * prev[i * kCols] * k[i];
        e += ds[i * kCols] * k[i];  // d delta_j
      }
      const float residual = v - decay * kv;
      const float d_beta = warp_sum(e * residual);
      if (blk.active) store_any(d.grad_v, a.qkv_bf16, gate * a.dv + blk.j, beta * e);
      e = -beta * e;  // gradient of (decay prev)^T k
      float d_decay = 0.0f;
      for (int64_t i = 0; i < a.dk; ++i) {
        const float before = keep * prev[i * kCols];
        red[i * kRedStride + lane] = ds[i * kCols] * beta * residual + decay * before * e;
        const float d_scaled = ds[i * kCols] + k[i] * e;
        d_decay += before * d_scaled;
        ds[i * kCols] = keep * decay * d_scaled;
      }
      reduce_rows(red, partial_k + gate * a.dk, a.dk);
      d_decay = warp_sum(d_decay);
      if (lane == 0) {
        partial_gate[gate * 2] = decay * d_decay;
        partial_gate[gate * 2 + 1] = d_beta;
      }
    }
  }
  if (blk.active && d.grad_initial_state != nullptr)
    for (int64_t i = 0; i < a.dk; ++i) d.grad_initial_state[blk.state_index(a, i)] = d_state[i * kCols + lane];
}

// dg and dbeta: the column tiles' shares added in order.
__global__ void delta_rule_gate_grads_kernel(const float* partial_gate, int64_t tiles, int64_t rows, void* grad_g,
                                             bool g_bf16, void* grad_beta, bool beta_bf16) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  float dg = 0.0f, dbeta = 0.0f;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    dg += partial_gate[(tile * rows + row) * 2];
    dbeta += partial_gate[(tile * rows + row) * 2 + 1];
  }
  store_any(grad_g, g_bf16, row, dg);
  store_any(grad_beta, beta_bf16, row, dbeta);
}

// One warp per (batch, token, key head) row of q or k (blockIdx.y: 0 q, 1 k):
// the shares of every tile and sharing value head, then the l2norm's chain rule.
__global__ void delta_rule_qk_grads_kernel(DeltaRuleArgs a, const float* partial_qk, int64_t tiles, int64_t rows,
                                           void* grad_q, void* grad_k) {
  __shared__ float dy[kMaxKeyDim];
  const int64_t row = blockIdx.x, which = blockIdx.y;  // row over B * T * Hk
  const int64_t group = a.value_heads / a.key_heads;
  const float factor = which == 0 ? a.scale : 1.0f;
  const void* x = which == 0 ? a.q : a.k;
  float xx = 0.0f, x_dy = 0.0f;
  for (int64_t i = threadIdx.x; i < a.dk; i += kCols) {
    float sum = 0.0f;
    for (int64_t tile = 0; tile < tiles; ++tile)
      for (int64_t h = 0; h < group; ++h) sum += partial_qk[((tile * 2 + which) * rows + row * group + h) * a.dk + i];
    dy[i] = factor * sum;
    const float xi = load_any(x, a.qkv_bf16, row * a.dk + i);
    xx += xi * xi;
    x_dy += xi * dy[i];
  }
  xx = warp_sum(xx);
  x_dy = warp_sum(x_dy);
  const float r = a.normalize ? 1.0f / sqrtf(xx + a.eps) : 1.0f;
  for (int64_t i = threadIdx.x; i < a.dk; i += kCols) {
    const float xi = load_any(x, a.qkv_bf16, row * a.dk + i);
    const float value = a.normalize ? r * (dy[i] - r * xi * r * x_dy) : dy[i];
    store_any(which == 0 ? grad_q : grad_k, a.qkv_bf16, row * a.dk + i, value);
  }
}

DeltaRuleArgs delta_rule_args(const char* op, const DeltaRuleInputs& in, const DeltaRuleOptions& options) {
  TITAN_CHECK(in.q.dtype() == DType::f32 || in.q.dtype() == DType::bf16, "{}: q has dtype {}, expected f32 or bf16", op,
              dtype_name(in.q.dtype()));
  TITAN_CHECK(in.q.size(3) <= kMaxKeyDim, "{}: the CUDA kernel takes key head dims up to {}, got {}", op, kMaxKeyDim,
              in.q.size(3));
  return {in.q.data_ptr(),
          in.k.data_ptr(),
          in.v.data_ptr(),
          in.g.data_ptr(),
          in.beta.data_ptr(),
          in.initial_state.defined() ? static_cast<const float*>(in.initial_state.data_ptr()) : nullptr,
          options.document_ids.defined() ? options.document_ids.data_ptr() : nullptr,
          options.document_ids.defined() && options.document_ids.dtype() == DType::i64,
          in.q.dtype() == DType::bf16,
          in.g.dtype() == DType::bf16,
          in.beta.dtype() == DType::bf16,
          in.q.size(1),
          in.q.size(2),
          in.v.size(2),
          in.q.size(3),
          in.v.size(3),
          options.chunk_size,
          *options.scale,
          options.qk_norm_eps,
          options.normalize_qk};
}

dim3 delta_rule_grid(const DeltaRuleInputs& in) {
  return dim3(static_cast<unsigned>(in.v.size(0) * in.v.size(2)),
              static_cast<unsigned>((in.v.size(3) + kCols - 1) / kCols));
}

// The chunked kernels' view of the problem, when options ask for that algorithm and the shape fits it.
std::optional<ChunkedDeltaRuleArgs> chunked_args(const DeltaRuleArgs& a, const DeltaRuleInputs& in,
                                                 const DeltaRuleOptions& options) {
  if (options.algorithm != DeltaRuleAlgorithm::chunked || !chunked_delta_rule_fits(a.segment, a.dk, a.dv)) {
    return std::nullopt;
  }
  return ChunkedDeltaRuleArgs{
      a.q,           a.k,        a.v,      a.g,         a.beta,       a.initial_state, a.document_ids,
      a.ids_i64,     a.qkv_bf16, a.g_bf16, a.beta_bf16, in.q.size(0), a.tokens,        a.key_heads,
      a.value_heads, a.dk,       a.dv,     a.segment,   a.scale,      a.eps,           a.normalize};
}

void delta_rule_kernel(const DeltaRuleOutput& result, const DeltaRuleInputs& in, const DeltaRuleOptions& options) {
  const DeltaRuleArgs args = delta_rule_args("gated_delta_rule", in, options);
  if (result.final_state.numel() == 0) return;
  if (const auto chunked = chunked_args(args, in, options)) {
    // Freed when this returns; the allocator orders reuse after the kernel on this stream.
    Tensor workspace = Tensor::empty({chunked_forward_workspace(*chunked)}, DType::f32, in.q.device());
    TITAN_CUDA_CHECK(launch_chunked_delta_rule_forward(*chunked, result.out.data_ptr(),
                                                       static_cast<float*>(result.final_state.data_ptr()),
                                                       static_cast<float*>(workspace.data_ptr()), current_stream()));
    return;
  }
  delta_rule_forward_kernel<<<delta_rule_grid(in), kCols, 0, current_stream()>>>(
      args, result.out.data_ptr(), static_cast<float*>(result.final_state.data_ptr()));
  TITAN_CUDA_CHECK(cudaGetLastError());
}

// The chunked backward writes one tile of q/k and gate shares, which the
// recurrence's finishing kernels add up as they do its column tiles' shares.
void chunked_backward_kernel(const DeltaRuleGrads& grads, const Tensor& grad_out, const Tensor& grad_final_state,
                             const DeltaRuleInputs& in, const DeltaRuleArgs& args,
                             const ChunkedDeltaRuleArgs& chunked) {
  const Device device = in.q.device();
  const int64_t rows = in.v.size(0) * in.v.size(1) * in.v.size(2);
  // Freed when this returns; the allocator orders reuse after the kernels on this stream.
  Tensor workspace = Tensor::empty({chunked_backward_workspace(chunked)}, DType::f32, device);
  Tensor partial_qk = Tensor::empty({2 * rows * args.dk}, DType::f32, device);
  Tensor partial_gate = Tensor::empty({rows * 2}, DType::f32, device);
  cudaStream_t stream = current_stream();
  TITAN_CUDA_CHECK(launch_chunked_delta_rule_backward(
      chunked, grad_out.data_ptr(),
      grad_final_state.defined() ? static_cast<const float*>(grad_final_state.data_ptr()) : nullptr,
      grads.grad_v.data_ptr(),
      grads.grad_initial_state.defined() ? static_cast<float*>(grads.grad_initial_state.data_ptr()) : nullptr,
      static_cast<float*>(partial_qk.data_ptr()), static_cast<float*>(partial_gate.data_ptr()),
      static_cast<float*>(workspace.data_ptr()), stream));
  if (rows == 0) return;
  delta_rule_gate_grads_kernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, stream>>>(
      static_cast<const float*>(partial_gate.data_ptr()), 1, rows, grads.grad_g.data_ptr(),
      grads.grad_g.dtype() == DType::bf16, grads.grad_beta.data_ptr(), grads.grad_beta.dtype() == DType::bf16);
  TITAN_CUDA_CHECK(cudaGetLastError());
  const int64_t key_rows = in.q.size(0) * in.q.size(1) * in.q.size(2);
  delta_rule_qk_grads_kernel<<<dim3(static_cast<unsigned>(key_rows), 2), kCols, 0, stream>>>(
      args, static_cast<const float*>(partial_qk.data_ptr()), 1, rows, grads.grad_q.data_ptr(),
      grads.grad_k.data_ptr());
  TITAN_CUDA_CHECK(cudaGetLastError());
}

void delta_rule_backward_kernel(const DeltaRuleGrads& grads, const Tensor& grad_out, const Tensor& grad_final_state,
                                const DeltaRuleInputs& in, const DeltaRuleOptions& options) {
  const DeltaRuleArgs args = delta_rule_args("gated_delta_rule_backward", in, options);
  if (const auto chunked = chunked_args(args, in, options); chunked && args.tokens > 0) {
    chunked_backward_kernel(grads, grad_out, grad_final_state, in, args, *chunked);
    return;
  }
  const dim3 grid = delta_rule_grid(in);
  const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y, tiles = grid.y;
  const int64_t rows = in.v.size(0) * in.v.size(1) * in.v.size(2);
  const int64_t segments = std::max<int64_t>(1, (args.tokens + args.segment - 1) / args.segment);
  const int64_t state_size = args.dk * kCols;
  if (blocks == 0) return;
  // Freed when this returns; the allocator orders reuse after the kernels on this stream.
  const Device device = in.q.device();
  Tensor checkpoints = Tensor::empty({blocks * segments * state_size}, DType::f32, device);
  Tensor segment_states = Tensor::empty({blocks * (args.segment + 1) * state_size}, DType::f32, device);
  Tensor partial_qk = Tensor::empty({tiles * 2 * rows * args.dk}, DType::f32, device);
  Tensor partial_gate = Tensor::empty({tiles * rows * 2}, DType::f32, device);
  const DeltaRuleGradArgs d{
      grad_out.data_ptr(),
      grad_final_state.defined() ? static_cast<const float*>(grad_final_state.data_ptr()) : nullptr,
      grads.grad_v.data_ptr(),
      grads.grad_initial_state.defined() ? static_cast<float*>(grads.grad_initial_state.data_ptr()) : nullptr,
      static_cast<float*>(checkpoints.data_ptr()),
      static_cast<float*>(segment_states.data_ptr()),
      static_cast<float*>(partial_qk.data_ptr()),
      static_cast<float*>(partial_gate.data_ptr()),
      rows};
  cudaStream_t stream = current_stream();
  delta_rule_backward_kernel<<<grid, kCols, 0, stream>>>(args, d);
  TITAN_CUDA_CHECK(cudaGetLastError());
  if (rows == 0) return;
  delta_rule_gate_grads_kernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, stream>>>(
      static_cast<const float*>(partial_gate.data_ptr()), tiles, rows, grads.grad_g.data_ptr(),
      grads.grad_g.dtype() == DType::bf16, grads.grad_beta.data_ptr(), grads.grad_beta.dtype() == DType::bf16);
  TITAN_CUDA_CHECK(cudaGetLastError());
  const int64_t key_rows = in.q.size(0) * in.q.size(1) * in.q.size(2);
  delta_rule_qk_grads_kernel<<<dim3(static_cast<unsigned>(key_rows), 2), kCols, 0, stream>>>(
      args, static_cast<const float*>(partial_qk.data_ptr()), tiles, rows, grads.grad_q.data_ptr(),
      grads.grad_k.data_ptr());
  TITAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void register_delta_rule() {
  delta_rule_kernels.set_kernel(DeviceType::cuda, delta_rule_kernel);
  delta_rule_backward_kernels.set_kernel(DeviceType::cuda, delta_rule_backward_kernel);
}

}  // namespace titan::ops::cuda
