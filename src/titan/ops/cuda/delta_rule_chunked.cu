// CUDA chunked gated delta rule (delta_rule_chunked.cuh): one block of 256
// threads per (batch row, value head), walking the chunks in order. Each
// chunk's matrices ([n, Dk], [n, Dv], [n, n]) live in a per-block slice of a
// device workspace (L2-resident at these sizes) and are computed one phase at
// a time, every thread taking elements in turn, with a barrier between phases;
// the working state is the final_state output itself. Every sum runs in a
// fixed order (per element, or per row by one warp), so results repeat
// bitwise. Small per-token vectors (the cumulative log-decays G, gamma, beta,
// document numbers) are in shared memory.
//
// Written for correctness first: the products are scalar f32 loops, not tensor
// cores. The recurrence (delta_rule.cu) remains the kernel for decoding and
// for shapes beyond kChunkedMaxChunk / kChunkedMaxHeadDim.
#include <cuda_bf16.h>

#include <cstdint>

#include "titan/ops/cuda/delta_rule_chunked.cuh"
#include "titan/ops/cuda/device_math.cuh"

namespace titan::ops::cuda {
namespace delta_rule_chunked_device {

constexpr int kBlock = 256;
constexpr int kWarps = kBlock / kWarpSize;

__device__ __forceinline__ float read(const void* p, bool bf16, int64_t i) {
  return bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void write(void* p, bool bf16, int64_t i, float v) {
  if (bf16)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}

// One block's chunk buffers in the workspace (floats), C = the chunk capacity.
struct Buffers {
  float *q, *k, *dq, *dk;                   // [C, Dk]
  float *v, *u, *r, *ks, *d_out, *du, *dr;  // [C, Dv]
  float *a, *kk, *p, *dp, *w;               // [C, C]
  float *d_state, *d_start;                 // [Dk, Dv]
  float* starts;                            // [chunks, Dk, Dv] (backward only)
};

__host__ __device__ inline int64_t chunk_floats(const ChunkedDeltaRuleArgs& a) {
  const int64_t c = a.chunk;
  return 4 * c * a.dk + 7 * c * a.dv + 5 * c * c + 2 * a.dk * a.dv;
}
__host__ __device__ inline int64_t chunk_count(const ChunkedDeltaRuleArgs& a) {
  return (a.tokens + a.chunk - 1) / a.chunk;
}

__device__ Buffers buffers(const ChunkedDeltaRuleArgs& a, float* workspace, bool with_starts) {
  const int64_t c = a.chunk, per_block = chunk_floats(a) + (with_starts ? chunk_count(a) * a.dk * a.dv : 0);
  float* at = workspace + static_cast<int64_t>(blockIdx.x) * per_block;
  Buffers b;
  for (float** x : {&b.q, &b.k, &b.dq, &b.dk}) {
    *x = at;
    at += c * a.dk;
  }
  for (float** x : {&b.v, &b.u, &b.r, &b.ks, &b.d_out, &b.du, &b.dr}) {
    *x = at;
    at += c * a.dv;
  }
  for (float** x : {&b.a, &b.kk, &b.p, &b.dp, &b.w}) {
    *x = at;
    at += c * c;
  }
  b.d_state = at;
  at += a.dk * a.dv;
  b.d_start = at;
  at += a.dk * a.dv;
  b.starts = with_starts ? at : nullptr;
  return b;
}

// The per-token values of the chunk being worked on.
struct Tokens {
  float g[kChunkedMaxChunk];      // cumulative log-decay G
  float gamma[kChunkedMaxChunk];  // exp(G), 0 once a document started inside the chunk
  float beta[kChunkedMaxChunk];
  int document[kChunkedMaxChunk];  // documents started inside the chunk at or before t
  int n;
  // Backward: the token gradients, and the per-token terms they sum (each
  // written by one phase, added up once at the end: no array is shared
  // between phases that run at the same time).
  float d_g[kChunkedMaxChunk], d_beta[kChunkedMaxChunk];
  float end_decay[kChunkedMaxChunk];  // de_t, through S_n's exp(Gn - Gt)
  float through_p[kChunkedMaxChunk];  // through D in P
  float q_dot[kChunkedMaxChunk];      // <dq_t, q_t> of O's gamma term
  float ks_dot[kChunkedMaxChunk];     // <dR_t, (K S0)_t>
  float r_dot[kChunkedMaxChunk];      // <dR_t, R_t>
  float kk_dot[kChunkedMaxChunk];     // sum_s dA[t,s] KK[t,s]
  float through_a[kChunkedMaxChunk];  // through D in A
};

struct Head {
  int64_t b, hv, hk;
  __device__ explicit Head(const ChunkedDeltaRuleArgs& a) {
    b = blockIdx.x / a.value_heads;
    hv = blockIdx.x % a.value_heads;
    hk = hv / (a.value_heads / a.key_heads);
  }
  __device__ int64_t qk_offset(const ChunkedDeltaRuleArgs& a, int64_t t) const {
    return ((b * a.tokens + t) * a.key_heads + hk) * a.dk;
  }
  __device__ int64_t row(const ChunkedDeltaRuleArgs& a, int64_t t) const {
    return (b * a.tokens + t) * a.value_heads + hv;
  }
  __device__ int64_t state_offset(const ChunkedDeltaRuleArgs& a) const {
    return (b * a.value_heads + hv) * a.dk * a.dv;
  }
  __device__ bool starts_document(const ChunkedDeltaRuleArgs& a, int64_t t) const {
    if (a.document_ids == nullptr || t == 0) return false;
    const int64_t at = b * a.tokens + t;
    return a.ids_i64
               ? static_cast<const int64_t*>(a.document_ids)[at] != static_cast<const int64_t*>(a.document_ids)[at - 1]
               : static_cast<const int32_t*>(a.document_ids)[at] != static_cast<const int32_t*>(a.document_ids)[at - 1];
  }
};

__device__ __forceinline__ float decay(const Tokens& tk, int t, int s) {
  return s <= t && tk.document[s] == tk.document[t] ? expf(tk.g[t] - tk.g[s]) : 0.0f;
}

__device__ float dot(const float* x, const float* y, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

// Loads the chunk's rows [t0, t0 + n): q (scaled, normalised; when with_q), k, v, and the token values.
__device__ void load_chunk(const ChunkedDeltaRuleArgs& a, const Head& h, int64_t t0, int n, bool with_q,
                           const Buffers& buf, Tokens& tk) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int t = warp; t < n; t += kWarps) {
    for (int which = with_q ? 0 : 1; which < 2; ++which) {
      const void* x = which == 0 ? a.q : a.k;
      float* row = (which == 0 ? buf.q : buf.k) + t * a.dk;
      float squares = 0.0f;
      for (int64_t i = lane; i < a.dk; i += kWarpSize) {
        row[i] = read(x, a.qkv_bf16, h.qk_offset(a, t0 + t) + i);
        squares += row[i] * row[i];
      }
      squares = warp_sum(squares);
      const float factor = which == 0 ? a.scale : 1.0f;
      const float f = a.normalize ? factor / sqrtf(squares + a.eps) : factor;
      for (int64_t i = lane; i < a.dk; i += kWarpSize) row[i] *= f;
    }
    for (int64_t j = lane; j < a.dv; j += kWarpSize)
      buf.v[t * a.dv + j] = read(a.v, a.qkv_bf16, h.row(a, t0 + t) * a.dv + j);
  }
  if (threadIdx.x == 0) {
    tk.n = n;
    float g = 0.0f;
    int document = 0;
    for (int t = 0; t < n; ++t) {
      g += read(a.g, a.g_bf16, h.row(a, t0 + t));
      document += h.starts_document(a, t0 + t) ? 1 : 0;
      tk.g[t] = g;
      tk.document[t] = document;
      tk.gamma[t] = document == 0 ? expf(g) : 0.0f;
      tk.beta[t] = read(a.beta, a.beta_bf16, h.row(a, t0 + t));
    }
  }
  __syncthreads();
}

// From the loaded chunk and its start state s0: KK, A, KS, R and U = (I + A)^-1 R.
__device__ void prepare(const ChunkedDeltaRuleArgs& a, const float* s0, const Buffers& buf, const Tokens& tk) {
  const int n = tk.n;
  for (int64_t e = threadIdx.x; e < n * n; e += kBlock) {
    const int t = static_cast<int>(e / n), s = static_cast<int>(e % n);
    const float kk = s < t ? decay(tk, t, s) * dot(buf.k + t * a.dk, buf.k + s * a.dk, a.dk) : 0.0f;
    buf.kk[t * n + s] = kk;
    buf.a[t * n + s] = tk.beta[t] * kk;
  }
  for (int64_t e = threadIdx.x; e < n * a.dv; e += kBlock) {
    const int64_t t = e / a.dv, j = e % a.dv;
    float ks = 0.0f;
    for (int64_t i = 0; i < a.dk; ++i) ks += buf.k[t * a.dk + i] * s0[i * a.dv + j];
    buf.ks[e] = ks;
    buf.r[e] = buf.v[e] - tk.gamma[t] * ks;
    buf.u[e] = tk.beta[t] * buf.r[e];
  }
  __syncthreads();
  // Forward substitution, one token at a time (row t needs every earlier row finished).
  for (int t = 1; t < n; ++t) {
    for (int64_t j = threadIdx.x; j < a.dv; j += kBlock) {
      float sum = buf.u[t * a.dv + j];
      for (int s = 0; s < t; ++s) sum -= buf.a[t * n + s] * buf.u[s * a.dv + j];
      buf.u[t * a.dv + j] = sum;
    }
    __syncthreads();
  }
}

// next = gamma_n s0 + K^T diag(exp(Gn - G)) U (next may be s0).
__device__ void advance(const ChunkedDeltaRuleArgs& a, const float* s0, float* next, const Buffers& buf,
                        const Tokens& tk) {
  const int n = tk.n;
  for (int64_t e = threadIdx.x; e < a.dk * a.dv; e += kBlock) {
    const int64_t i = e / a.dv, j = e % a.dv;
    float sum = tk.gamma[n - 1] * s0[e];
    for (int t = 0; t < n; ++t) sum += buf.k[t * a.dk + i] * decay(tk, n - 1, t) * buf.u[t * a.dv + j];
    next[e] = sum;
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kBlock)
    chunked_forward(ChunkedDeltaRuleArgs a, void* out, float* final_state, float* workspace) {
  __shared__ Tokens tk;
  const Head h(a);
  const Buffers buf = buffers(a, workspace, false);
  float* state = final_state + h.state_offset(a);
  for (int64_t e = threadIdx.x; e < a.dk * a.dv; e += kBlock)
    state[e] = a.initial_state != nullptr ? a.initial_state[h.state_offset(a) + e] : 0.0f;
  __syncthreads();
  for (int64_t t0 = 0; t0 < a.tokens; t0 += a.chunk) {
    const int n = static_cast<int>(a.tokens - t0 < a.chunk ? a.tokens - t0 : a.chunk);
    load_chunk(a, h, t0, n, true, buf, tk);
    prepare(a, state, buf, tk);
    // O = diag(gamma) Q S0 + (D o QK^T, s <= t) U
    for (int64_t e = threadIdx.x; e < n * n; e += kBlock) {
      const int t = static_cast<int>(e / n), s = static_cast<int>(e % n);
      buf.p[e] = s <= t ? decay(tk, t, s) * dot(buf.q + t * a.dk, buf.k + s * a.dk, a.dk) : 0.0f;
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < n * a.dv; e += kBlock) {
      const int t = static_cast<int>(e / a.dv);
      const int64_t j = e % a.dv;
      float qs = 0.0f;
      for (int64_t i = 0; i < a.dk; ++i) qs += buf.q[t * a.dk + i] * state[i * a.dv + j];
      float sum = tk.gamma[t] * qs;
      for (int s = 0; s <= t; ++s) sum += buf.p[t * n + s] * buf.u[s * a.dv + j];
      write(out, a.qkv_bf16, h.row(a, t0 + t) * a.dv + j, sum);
    }
    __syncthreads();
    advance(a, state, state, buf, tk);
  }
}

// Sum over the block of one value per thread, in a fixed order; every thread gets it.
__device__ float block_total(float v) {
  __shared__ float scratch[kWarpSize];
  return block_sum(v, scratch);
}

// The backward of one chunk (the CPU's ChunkBackward::run, step by step):
// buf.d_state arrives as the gradient of the chunk's end state and leaves as
// that of its start state s0; buf.dq and buf.dk receive the gradients of the
// chunk's scaled, normalised q and k rows, buf.du that of v, tk.d_g and
// tk.d_beta those of g and beta.
__device__ void chunk_backward(const ChunkedDeltaRuleArgs& a, const float* s0, const Buffers& buf, Tokens& tk) {
  const int n = tk.n;
  const int64_t dk = a.dk, dv = a.dv;
  const float gamma_n = tk.gamma[n - 1];
  // S_n = gamma_n S0 + K^T diag(e) U, e_t = exp(Gn - Gt): d_start = gamma_n dSn, dG[n-1] += gamma_n <S0, dSn>.
  float partial = 0.0f;
  for (int64_t e = threadIdx.x; e < dk * dv; e += kBlock) {
    partial += s0[e] * buf.d_state[e];
    buf.d_start[e] = gamma_n * buf.d_state[e];
  }
  const float s0_ds = block_total(partial);                 // its barriers also end the phase
  for (int64_t e = threadIdx.x; e < n * dv; e += kBlock) {  // du = e_t (K dSn)_t
    const int t = static_cast<int>(e / dv);
    const int64_t j = e % dv;
    float sum = 0.0f;
    for (int64_t i = 0; i < dk; ++i) sum += buf.k[t * dk + i] * buf.d_state[i * dv + j];
    buf.du[e] = decay(tk, n - 1, t) * sum;
  }
  for (int64_t e = threadIdx.x; e < n * dk; e += kBlock) {  // dk = e_t (U dSn^T)_t
    const int t = static_cast<int>(e / dk);
    const int64_t i = e % dk;
    float sum = 0.0f;
    for (int64_t j = 0; j < dv; ++j) sum += buf.u[t * dv + j] * buf.d_state[i * dv + j];
    buf.dk[e] = decay(tk, n - 1, t) * sum;
  }
  // P = (D o QK^T, s <= t); dP = (dO U^T, s <= t).
  for (int64_t e = threadIdx.x; e < n * n; e += kBlock) {
    const int t = static_cast<int>(e / n), s = static_cast<int>(e % n);
    buf.p[e] = s <= t ? decay(tk, t, s) * dot(buf.q + t * dk, buf.k + s * dk, dk) : 0.0f;
    buf.dp[e] = s <= t ? dot(buf.d_out + t * dv, buf.u + s * dv, dv) : 0.0f;
  }
  __syncthreads();
  // de_t = e_t <(U dSn^T)_t, k_t> (buf.dk holds it scaled by e_t): dG[n-1] += de_t, dG[t] -= de_t.
  // Through D in P: z[t,s] = dP P; dG[t] += sum_s z[t,s], dG[s] -= sum_t z[t,s].
  for (int t = threadIdx.x; t < n; t += kBlock) {
    tk.end_decay[t] = dot(buf.dk + t * dk, buf.k + t * dk, dk);
    float row = 0.0f, column = 0.0f;
    for (int s = 0; s < n; ++s) {
      row += buf.dp[t * n + s] * buf.p[t * n + s];
      column += buf.dp[s * n + t] * buf.p[s * n + t];
    }
    tk.through_p[t] = row - column;
  }
  // du += P^T dO
  for (int64_t e = threadIdx.x; e < n * dv; e += kBlock) {
    const int s = static_cast<int>(e / dv);
    const int64_t j = e % dv;
    float sum = 0.0f;
    for (int t = s; t < n; ++t) sum += buf.p[t * n + s] * buf.d_out[t * dv + j];
    buf.du[e] += sum;
  }
  // dq = gamma_t (dO S0^T)_t
  for (int64_t e = threadIdx.x; e < n * dk; e += kBlock) {
    const int t = static_cast<int>(e / dk);
    const int64_t i = e % dk;
    float sum = 0.0f;
    for (int64_t j = 0; j < dv; ++j) sum += buf.d_out[t * dv + j] * s0[i * dv + j];
    buf.dq[e] = tk.gamma[t] * sum;
  }
  // d_start += Q^T diag(gamma) dO
  for (int64_t e = threadIdx.x; e < dk * dv; e += kBlock) {
    const int64_t i = e / dv, j = e % dv;
    float sum = 0.0f;
    for (int t = 0; t < n; ++t) sum += tk.gamma[t] * buf.q[t * dk + i] * buf.d_out[t * dv + j];
    buf.d_start[e] += sum;
  }
  __syncthreads();
  for (int t = threadIdx.x; t < n; t += kBlock) tk.q_dot[t] = dot(buf.dq + t * dk, buf.q + t * dk, dk);
  for (int64_t e = threadIdx.x; e < n * n; e += kBlock) {  // dQK = dP o D
    const int t = static_cast<int>(e / n), s = static_cast<int>(e % n);
    buf.dp[e] *= decay(tk, t, s);
  }
  __syncthreads();
  // dq += dQK K; dk += dQK^T Q
  for (int64_t e = threadIdx.x; e < n * dk; e += kBlock) {
    const int t = static_cast<int>(e / dk);
    const int64_t i = e % dk;
    float from_q = 0.0f, from_k = 0.0f;
    for (int s = 0; s < n; ++s) {
      from_q += buf.dp[t * n + s] * buf.k[s * dk + i];
      from_k += buf.dp[s * n + t] * buf.q[s * dk + i];
    }
    buf.dq[e] += from_q;
    buf.dk[e] += from_k;
  }
  // dR = (I + A)^-T dU: back substitution, one token at a time from the last.
  for (int t = n - 1; t >= 0; --t) {
    for (int64_t j = threadIdx.x; j < dv; j += kBlock) {
      float sum = buf.du[t * dv + j];
      for (int s = t + 1; s < n; ++s) sum -= buf.a[s * n + t] * buf.dr[s * dv + j];
      buf.dr[t * dv + j] = sum;
    }
    __syncthreads();
  }
  // W = dR U^T (dA = -W below the diagonal); R = diag(beta) (V - diag(gamma) K S0) gives dbeta and dG terms.
  for (int64_t e = threadIdx.x; e < n * n; e += kBlock) {
    const int t = static_cast<int>(e / n), s = static_cast<int>(e % n);
    buf.w[e] = s < t ? dot(buf.dr + t * dv, buf.u + s * dv, dv) : 0.0f;
  }
  for (int t = threadIdx.x; t < n; t += kBlock) {
    tk.ks_dot[t] = dot(buf.dr + t * dv, buf.ks + t * dv, dv);
    tk.r_dot[t] = dot(buf.dr + t * dv, buf.r + t * dv, dv);
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < n * dv; e += kBlock) {
    const int t = static_cast<int>(e / dv);
    const float d = buf.dr[e];
    buf.du[e] = tk.beta[t] * d;                 // dV
    buf.dr[e] = -tk.beta[t] * tk.gamma[t] * d;  // d(K S0)
  }
  // A[t,s] = beta_t D[t,s] k_t.k_s (s < t), dA = -W: dbeta, and d(k_t.k_s) into p.
  for (int t = threadIdx.x; t < n; t += kBlock) {
    float d_beta = 0.0f, row = 0.0f, column = 0.0f;
    for (int s = 0; s < n; ++s) {
      if (s < t) {
        d_beta -= buf.w[t * n + s] * buf.kk[t * n + s];
        row -= buf.w[t * n + s] * buf.a[t * n + s];
      } else if (s > t) {
        column -= buf.w[s * n + t] * buf.a[s * n + t];
      }
    }
    tk.kk_dot[t] = d_beta;
    tk.through_a[t] = row - column;
  }
  for (int64_t e = threadIdx.x; e < n * n; e += kBlock) {
    const int t = static_cast<int>(e / n), s = static_cast<int>(e % n);
    buf.p[e] = s < t ? -buf.w[e] * tk.beta[t] * decay(tk, t, s) : 0.0f;
  }
  __syncthreads();
  // dk += d(KS0) S0^T + M K + M^T K (M = d(k_t.k_s) in p); d_start += K^T d(KS0).
  for (int64_t e = threadIdx.x; e < n * dk; e += kBlock) {
    const int t = static_cast<int>(e / dk);
    const int64_t i = e % dk;
    float sum = 0.0f;
    for (int64_t j = 0; j < dv; ++j) sum += buf.dr[t * dv + j] * s0[i * dv + j];
    for (int s = 0; s < n; ++s) sum += (buf.p[t * n + s] + buf.p[s * n + t]) * buf.k[s * dk + i];
    buf.dk[e] += sum;
  }
  for (int64_t e = threadIdx.x; e < dk * dv; e += kBlock) {
    const int64_t i = e / dv, j = e % dv;
    float sum = 0.0f;
    for (int t = 0; t < n; ++t) sum += buf.k[t * dk + i] * buf.dr[t * dv + j];
    buf.d_start[e] += sum;
    buf.d_state[e] = buf.d_start[e];
  }
  if (threadIdx.x == 0) {
    float end = gamma_n * s0_ds;
    for (int t = 0; t < n; ++t) {
      end += tk.end_decay[t];
      tk.d_g[t] =
          -tk.end_decay[t] + tk.through_p[t] + tk.q_dot[t] - tk.beta[t] * tk.gamma[t] * tk.ks_dot[t] + tk.through_a[t];
      tk.d_beta[t] = tk.r_dot[t] + tk.kk_dot[t];
    }
    tk.d_g[n - 1] += end;
    for (int t = n - 2; t >= 0; --t) tk.d_g[t] += tk.d_g[t + 1];  // G_t = g_1 + ... + g_t
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kBlock)
    chunked_backward(ChunkedDeltaRuleArgs a, const void* grad_out, const float* grad_final_state, void* grad_v,
                     float* grad_initial_state, float* partial_qk, float* partial_gate, float* workspace) {
  __shared__ Tokens tk;
  const Head h(a);
  const Buffers buf = buffers(a, workspace, true);
  const int64_t size = a.dk * a.dv, chunks = chunk_count(a), rows = a.batch * a.tokens * a.value_heads;
  for (int64_t e = threadIdx.x; e < size; e += kBlock) {
    buf.starts[e] = a.initial_state != nullptr ? a.initial_state[h.state_offset(a) + e] : 0.0f;
    buf.d_state[e] = grad_final_state != nullptr ? grad_final_state[h.state_offset(a) + e] : 0.0f;
  }
  __syncthreads();
  for (int64_t c = 0; c + 1 < chunks; ++c) {  // the chunk start states
    load_chunk(a, h, c * a.chunk, static_cast<int>(a.chunk), false, buf, tk);
    prepare(a, buf.starts + c * size, buf, tk);
    advance(a, buf.starts + c * size, buf.starts + (c + 1) * size, buf, tk);
  }
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * a.chunk;
    const int n = static_cast<int>(a.tokens - t0 < a.chunk ? a.tokens - t0 : a.chunk);
    load_chunk(a, h, t0, n, true, buf, tk);
    for (int64_t e = threadIdx.x; e < n * a.dv; e += kBlock) {
      const int64_t t = e / a.dv, j = e % a.dv;
      buf.d_out[e] = read(grad_out, a.qkv_bf16, h.row(a, t0 + t) * a.dv + j);
    }
    const float* s0 = buf.starts + c * size;
    prepare(a, s0, buf, tk);  // its barriers also cover d_out
    chunk_backward(a, s0, buf, tk);
    for (int64_t e = threadIdx.x; e < n * a.dk; e += kBlock) {
      const int64_t t = e / a.dk, i = e % a.dk, row = h.row(a, t0 + t);
      partial_qk[row * a.dk + i] = buf.dq[e];
      partial_qk[(rows + row) * a.dk + i] = buf.dk[e];
    }
    for (int64_t e = threadIdx.x; e < n * a.dv; e += kBlock) {
      const int64_t t = e / a.dv, j = e % a.dv;
      write(grad_v, a.qkv_bf16, h.row(a, t0 + t) * a.dv + j, buf.du[e]);
    }
    for (int t = threadIdx.x; t < n; t += kBlock) {
      const int64_t row = h.row(a, t0 + t);
      partial_gate[row * 2] = tk.d_g[t];
      partial_gate[row * 2 + 1] = tk.d_beta[t];
    }
    __syncthreads();  // before the next chunk's load replaces the buffers
  }
  if (grad_initial_state != nullptr)
    for (int64_t e = threadIdx.x; e < size; e += kBlock) grad_initial_state[h.state_offset(a) + e] = buf.d_state[e];
}

}  // namespace delta_rule_chunked_device

int64_t chunked_forward_workspace(const ChunkedDeltaRuleArgs& a) {
  return a.batch * a.value_heads * delta_rule_chunked_device::chunk_floats(a);
}

int64_t chunked_backward_workspace(const ChunkedDeltaRuleArgs& a) {
  using namespace delta_rule_chunked_device;
  return a.batch * a.value_heads * (chunk_floats(a) + chunk_count(a) * a.dk * a.dv);
}

cudaError_t launch_chunked_delta_rule_forward(const ChunkedDeltaRuleArgs& a, void* out, float* final_state,
                                              float* workspace, cudaStream_t stream) {
  const int64_t blocks = a.batch * a.value_heads;
  if (blocks == 0) return cudaSuccess;
  delta_rule_chunked_device::
      chunked_forward<<<static_cast<unsigned>(blocks), delta_rule_chunked_device::kBlock, 0, stream>>>(
          a, out, final_state, workspace);
  return cudaGetLastError();
}

cudaError_t launch_chunked_delta_rule_backward(const ChunkedDeltaRuleArgs& a, const void* grad_out,
                                               const float* grad_final_state, void* grad_v, float* grad_initial_state,
                                               float* partial_qk, float* partial_gate, float* workspace,
                                               cudaStream_t stream) {
  const int64_t blocks = a.batch * a.value_heads;
  if (blocks == 0 || a.tokens == 0) return cudaSuccess;
  delta_rule_chunked_device::
      chunked_backward<<<static_cast<unsigned>(blocks), delta_rule_chunked_device::kBlock, 0, stream>>>(
          a, grad_out, grad_final_state, grad_v, grad_initial_state, partial_qk, partial_gate, workspace);
  return cudaGetLastError();
}

}  // namespace titan::ops::cuda
