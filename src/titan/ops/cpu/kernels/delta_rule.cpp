// CPU gated delta rule (ops/delta_rule.h), both algorithms, forward and
// backward. Work items are (batch row, value head) pairs, in parallel; each
// walks its whole sequence with an f32 state of [Dk, Dv].
//
// recurrent: two passes over the state per token (S^T k, then the update
// fused with o = S^T q). Its backward keeps the state at every chunk_size-th
// token, recomputes the states of one segment at a time and walks it in
// reverse.
//
// chunked, per chunk of n tokens with cumulative log-decays G (Gt = g_1 + ...
// + g_t inside the chunk), gamma_t = exp(Gt), D[t,s] = exp(Gt - Gs), state S0
// at the chunk's start:
//   A[t,s] = beta_t D[t,s] k_t.k_s (s < t)          strictly lower
//   R      = diag(beta) (V - diag(gamma) K S0)
//   U      = (I + A)^-1 R                            forward substitution (UT transform)
//   O      = diag(gamma) Q S0 + (D o QK^T, s <= t) U
//   S_n    = gamma_n S0 + K^T diag(exp(Gn - G)) U
// U holds each token's beta_t (v_t - exp(g_t) S_{t-1}^T k_t), so this is the
// recurrence, not an approximation of it. The backward recomputes the chunk
// start states in a forward pass, then differentiates those five lines chunk
// by chunk in reverse (dR = (I + A)^-T dU by back substitution,
// dA = -dR U^T). Gradients of the cumulative G are turned into gradients of g
// by a reverse cumulative sum.
//
// Packed documents (options.document_ids): the recurrent form zeroes the
// state at a document's first token; the chunked form zeroes D across
// documents and gamma after a restart inside the chunk, which is the same.
//
// Both backwards produce the gradients of the normalised, scaled q and k per
// value head; a last pass sums them over the value heads that share a key
// head and applies the l2norm's chain rule.
#include <cmath>
#include <vector>

#include "titan/ops/delta_rule.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

// ---- element access by runtime dtype (rows are long, the switch is per row) ----

void load_row(const Tensor& t, int64_t offset, int64_t n, float* dst) {
  if (t.dtype() == DType::f32) {
    std::memcpy(dst, t.data<float>() + offset, static_cast<size_t>(n) * sizeof(float));
  } else {
    const bf16* src = t.data<bf16>() + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
  }
}

void store_row(const Tensor& t, int64_t offset, int64_t n, const float* src) {
  if (t.dtype() == DType::f32) {
    std::memcpy(t.data<float>() + offset, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    bf16* dst = t.data<bf16>() + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = from_f32<bf16>(src[i]);
  }
}

float load_scalar(const Tensor& t, int64_t index) {
  return t.dtype() == DType::f32 ? t.data<float>()[index] : to_f32(t.data<bf16>()[index]);
}

void store_scalar(const Tensor& t, int64_t index, float value) {
  if (t.dtype() == DType::f32)
    t.data<float>()[index] = value;
  else
    t.data<bf16>()[index] = from_f32<bf16>(value);
}

float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y += alpha * x
void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// C[m, n] += A[m, k] B[k, n], row-major with leading dimensions. Blocks of 4
// rows by 64 columns keep the accumulators in registers, so B is read once
// per 4 rows of C instead of once per row.
void gemm_acc(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc) {
  constexpr int64_t kRows = 4, kCols = 64;
  int64_t i0 = 0;
  for (; i0 + kRows <= m; i0 += kRows) {
    int64_t j0 = 0;
    for (; j0 + kCols <= n; j0 += kCols) {
      float acc[kRows][kCols];
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t j = 0; j < kCols; ++j) acc[r][j] = c[(i0 + r) * ldc + j0 + j];
      for (int64_t p = 0; p < k; ++p) {
        const float* brow = b + p * ldb + j0;
        for (int64_t r = 0; r < kRows; ++r) {
          const float alpha = a[(i0 + r) * lda + p];
#pragma omp simd
          for (int64_t j = 0; j < kCols; ++j) acc[r][j] += alpha * brow[j];
        }
      }
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t j = 0; j < kCols; ++j) c[(i0 + r) * ldc + j0 + j] = acc[r][j];
    }
    if (j0 < n) {
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t p = 0; p < k; ++p) axpy(a[(i0 + r) * lda + p], b + p * ldb + j0, c + (i0 + r) * ldc + j0, n - j0);
    }
  }
  for (; i0 < m; ++i0)
    for (int64_t p = 0; p < k; ++p) axpy(a[i0 * lda + p], b + p * ldb, c + i0 * ldc, n);
}

// dst[cols, rows] = src[rows, cols]^T (src with leading dimension ld).
void transpose(int64_t rows, int64_t cols, const float* src, int64_t ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * ld + c];
}

// ---- one (batch row, value head): where its rows are, and their f32 copies ----

struct HeadRows {
  const DeltaRuleInputs& in;
  const DeltaRuleOptions& options;
  int64_t tokens, key_heads, value_heads, dk, dv;
  int64_t b = 0, hv = 0, hk = 0;

  HeadRows(const DeltaRuleInputs& inputs, const DeltaRuleOptions& opts)
      : in(inputs),
        options(opts),
        tokens(inputs.q.size(1)),
        key_heads(inputs.q.size(2)),
        value_heads(inputs.v.size(2)),
        dk(inputs.q.size(3)),
        dv(inputs.v.size(3)) {}
  void select(int64_t item) {
    b = item / value_heads;
    hv = item % value_heads;
    hk = hv / (value_heads / key_heads);
  }
  int64_t qk_offset(int64_t t) const { return ((b * tokens + t) * key_heads + hk) * dk; }
  int64_t v_offset(int64_t t) const { return ((b * tokens + t) * value_heads + hv) * dv; }
  int64_t gate_index(int64_t t) const { return (b * tokens + t) * value_heads + hv; }
  int64_t state_offset() const { return (b * value_heads + hv) * dk * dv; }
  // Whether token t starts a new document (the state restarts from zero there).
  bool starts_document(int64_t t) const {
    const Tensor& ids = options.document_ids;
    if (!ids.defined() || t == 0) return false;
    const int64_t at = b * tokens + t;
    return ids.dtype() == DType::i64 ? ids.data<int64_t>()[at] != ids.data<int64_t>()[at - 1]
                                     : ids.data<int32_t>()[at] != ids.data<int32_t>()[at - 1];
  }

  // q rows as the recurrence uses them: scale * l2norm(q) (or scale * q).
  void load_qk(const Tensor& x, int64_t t, float factor, float* dst) const {
    load_row(x, qk_offset(t), dk, dst);
    float f = factor;
    if (options.normalize_qk) f /= std::sqrt(dot(dst, dst, dk) + options.qk_norm_eps);
#pragma omp simd
    for (int64_t i = 0; i < dk; ++i) dst[i] *= f;
  }
  // Tokens [t0, t0 + n): q, k rows ([n, Dk]), v rows ([n, Dv]), g and beta.
  void load(int64_t t0, int64_t n, float* q, float* k, float* v, float* g, float* beta) const {
    for (int64_t t = 0; t < n; ++t) {
      if (q != nullptr) load_qk(in.q, t0 + t, *options.scale, q + t * dk);
      load_qk(in.k, t0 + t, 1.0f, k + t * dk);
      load_row(in.v, v_offset(t0 + t), dv, v + t * dv);
      g[t] = load_scalar(in.g, gate_index(t0 + t));
      beta[t] = load_scalar(in.beta, gate_index(t0 + t));
    }
  }
  void load_initial_state(float* state) const {
    const int64_t size = dk * dv;
    if (in.initial_state.defined())
      std::memcpy(state, in.initial_state.data<float>() + state_offset(), static_cast<size_t>(size) * sizeof(float));
    else
      std::fill(state, state + size, 0.0f);
  }
};

// Where a backward puts the gradients of one head: dq', dk' (of the scaled,
// normalised rows) in f32 scratch [B, T, Hv, Dk], the others in place.
struct HeadGrads {
  const DeltaRuleGrads& grads;
  float* dq_scratch;
  float* dk_scratch;
  void store(const HeadRows& rows, int64_t t, const float* dq, const float* dk, const float* dv, float dg,
             float dbeta) const {
    const int64_t row = (rows.b * rows.tokens + t) * rows.value_heads + rows.hv;
    std::memcpy(dq_scratch + row * rows.dk, dq, static_cast<size_t>(rows.dk) * sizeof(float));
    std::memcpy(dk_scratch + row * rows.dk, dk, static_cast<size_t>(rows.dk) * sizeof(float));
    store_row(grads.grad_v, rows.v_offset(t), rows.dv, dv);
    store_scalar(grads.grad_g, rows.gate_index(t), dg);
    store_scalar(grads.grad_beta, rows.gate_index(t), dbeta);
  }
  void store_initial_state(const HeadRows& rows, const float* d_state) const {
    if (!grads.grad_initial_state.defined()) return;
    std::memcpy(grads.grad_initial_state.data<float>() + rows.state_offset(), d_state,
                static_cast<size_t>(rows.dk * rows.dv) * sizeof(float));
  }
};

// Sums dq', dk' over the value heads of each key head, then through
// x' = factor * x / sqrt(|x|^2 + eps): dx = r (dy - y (y . dy)), y = r x, dy = factor * dx'.
void finish_qk_grads(const DeltaRuleInputs& in, const DeltaRuleOptions& options, const DeltaRuleGrads& grads,
                     const float* dq_scratch, const float* dk_scratch) {
  const int64_t rows = in.q.size(0) * in.q.size(1) * in.q.size(2), dk = in.q.size(3);
  const int64_t group = in.v.size(2) / in.q.size(2);
  parallel_for(rows, 64, [&](int64_t begin, int64_t end) {
    std::vector<float> x(static_cast<size_t>(dk)), dy(static_cast<size_t>(dk));
    for (int64_t row = begin; row < end; ++row) {
      for (int which = 0; which < 2; ++which) {
        const Tensor& input = which == 0 ? in.q : in.k;
        const float* scratch = which == 0 ? dq_scratch : dk_scratch;
        const float factor = which == 0 ? *options.scale : 1.0f;
        std::fill(dy.begin(), dy.end(), 0.0f);
        for (int64_t h = 0; h < group; ++h) axpy(factor, scratch + (row * group + h) * dk, dy.data(), dk);
        if (options.normalize_qk) {
          load_row(input, row * dk, dk, x.data());
          const float r = 1.0f / std::sqrt(dot(x.data(), x.data(), dk) + options.qk_norm_eps);
          const float y_dot_dy = r * dot(x.data(), dy.data(), dk);
#pragma omp simd
          for (int64_t i = 0; i < dk; ++i) dy[i] = r * (dy[i] - r * x[i] * y_dot_dy);
        }
        store_row(which == 0 ? grads.grad_q : grads.grad_k, row * dk, dk, dy.data());
      }
    }
  });
}

// ---- recurrent ----

// One token: state <- exp(g) state + k (beta (v - exp(g) state^T k))^T; out = state^T q
// when out is given. kv is Dv floats of scratch.
void recurrent_step(float* state, const float* q, const float* k, const float* v, float g, float beta, float* out,
                    float* kv, int64_t dk, int64_t dv) {
  const float decay = std::exp(g);
  std::fill(kv, kv + dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) axpy(k[i], state + i * dv, kv, dv);
#pragma omp simd
  for (int64_t j = 0; j < dv; ++j) kv[j] = beta * (v[j] - decay * kv[j]);  // now the delta
  if (out != nullptr) std::fill(out, out + dv, 0.0f);
  for (int64_t i = 0; i < dk; ++i) {
    float* row = state + i * dv;
    const float ki = k[i], qi = out != nullptr ? q[i] : 0.0f;
#pragma omp simd
    for (int64_t j = 0; j < dv; ++j) {
      row[j] = decay * row[j] + ki * kv[j];
      if (out != nullptr) out[j] += qi * row[j];
    }
  }
}

void recurrent_forward(const DeltaRuleOutput& result, const DeltaRuleInputs& in, const DeltaRuleOptions& options) {
  const HeadRows shape(in, options);
  parallel_for(in.v.size(0) * shape.value_heads, 1, [&](int64_t begin, int64_t end) {
    HeadRows rows(in, options);
    const int64_t dk = rows.dk, dv = rows.dv;
    std::vector<float> state(static_cast<size_t>(dk * dv)), q(dk), k(dk), v(dv), out(dv), kv(dv);
    for (int64_t item = begin; item < end; ++item) {
      rows.select(item);
      rows.load_initial_state(state.data());
      for (int64_t t = 0; t < rows.tokens; ++t) {
        float g, beta;
        rows.load(t, 1, q.data(), k.data(), v.data(), &g, &beta);
        if (rows.starts_document(t)) std::fill(state.begin(), state.end(), 0.0f);
        recurrent_step(state.data(), q.data(), k.data(), v.data(), g, beta, out.data(), kv.data(), dk, dv);
        store_row(result.out, rows.v_offset(t), dv, out.data());
      }
      std::memcpy(result.final_state.data<float>() + rows.state_offset(), state.data(),
                  static_cast<size_t>(dk * dv) * sizeof(float));
    }
  });
}

// Reverse through one token, given the state before it (prev) and after it
// (next): d_state arrives as the gradient of `next` and leaves as that of `prev`.
void recurrent_step_backward(const float* prev, const float* next, const float* q, const float* k, const float* v,
                             float g, float beta, const float* d_out, float* d_state, float* dq, float* dk,
                             float* dv_out, float* dg, float* dbeta, float* residual, float* e, int64_t kdim,
                             int64_t vdim) {
  const float decay = std::exp(g);
  for (int64_t i = 0; i < kdim; ++i) dq[i] = dot(next + i * vdim, d_out, vdim);  // o = next^T q
  for (int64_t i = 0; i < kdim; ++i) axpy(q[i], d_out, d_state + i * vdim, vdim);
  // residual = v - decay prev^T k; delta = beta residual
  std::fill(residual, residual + vdim, 0.0f);
  for (int64_t i = 0; i < kdim; ++i) axpy(-decay * k[i], prev + i * vdim, residual, vdim);
  for (int64_t j = 0; j < vdim; ++j) residual[j] += v[j];
  // d_delta = d_state^T k (kept in e); dk = d_state delta
  std::fill(e, e + vdim, 0.0f);
  for (int64_t i = 0; i < kdim; ++i) {
    axpy(k[i], d_state + i * vdim, e, vdim);
    dk[i] = beta * dot(d_state + i * vdim, residual, vdim);
  }
  *dbeta = dot(e, residual, vdim);
  for (int64_t j = 0; j < vdim; ++j) {
    dv_out[j] = beta * e[j];
    e[j] = -beta * e[j];  // gradient of (decay prev)^T k
  }
  // d(decay prev) = d_state + k e^T; dk += decay prev e; d decay = sum(prev o d(decay prev)).
  float d_decay = 0.0f;
  for (int64_t i = 0; i < kdim; ++i) {
    const float* row = prev + i * vdim;
    float* drow = d_state + i * vdim;
    dk[i] += decay * dot(row, e, vdim);
    const float ki = k[i];
    float partial = 0.0f;
#pragma omp simd reduction(+ : partial)
    for (int64_t j = 0; j < vdim; ++j) {
      const float d_scaled = drow[j] + ki * e[j];
      partial += row[j] * d_scaled;
      drow[j] = decay * d_scaled;
    }
    d_decay += partial;
  }
  *dg = decay * d_decay;
}

void recurrent_backward(const DeltaRuleGrads& grads, const Tensor& grad_out, const Tensor& grad_final_state,
                        const DeltaRuleInputs& in, const DeltaRuleOptions& options, const HeadGrads& sink) {
  const HeadRows shape(in, options);
  const int64_t segment = options.chunk_size;
  parallel_for(in.v.size(0) * shape.value_heads, 1, [&](int64_t begin, int64_t end) {
    HeadRows rows(in, options);
    const int64_t dk = rows.dk, dv = rows.dv, size = dk * dv, tokens = rows.tokens;
    const int64_t segments = (tokens + segment - 1) / segment;
    std::vector<float> starts(static_cast<size_t>(std::max<int64_t>(segments, 1) * size));
    std::vector<float> states(static_cast<size_t>((segment + 1) * size)), d_state(size), zeros(size, 0.0f);
    std::vector<float> q(segment * dk), k(segment * dk), v(segment * dv), g(segment), beta(segment);
    std::vector<float> dq(dk), dkv(dk), dvv(dv), d_out(dv), residual(dv), e(dv);
    for (int64_t item = begin; item < end; ++item) {
      rows.select(item);
      rows.load_initial_state(starts.data());
      for (int64_t s = 0; s + 1 < segments; ++s) {  // the state at each segment's start
        std::memcpy(starts.data() + (s + 1) * size, starts.data() + s * size, static_cast<size_t>(size) * 4);
        for (int64_t t = s * segment; t < (s + 1) * segment; ++t) {
          float gt, bt;
          rows.load(t, 1, nullptr, k.data(), v.data(), &gt, &bt);
          if (rows.starts_document(t))
            std::fill(starts.begin() + (s + 1) * size, starts.begin() + (s + 2) * size, 0.0f);
          recurrent_step(starts.data() + (s + 1) * size, nullptr, k.data(), v.data(), gt, bt, nullptr, e.data(), dk,
                         dv);
        }
      }
      if (grad_final_state.defined())
        std::memcpy(d_state.data(), grad_final_state.data<float>() + rows.state_offset(),
                    static_cast<size_t>(size) * sizeof(float));
      else
        std::fill(d_state.begin(), d_state.end(), 0.0f);
      for (int64_t s = segments - 1; s >= 0; --s) {
        const int64_t t0 = s * segment, n = std::min(segment, tokens - t0);
        rows.load(t0, n, q.data(), k.data(), v.data(), g.data(), beta.data());
        std::memcpy(states.data(), starts.data() + s * size, static_cast<size_t>(size) * sizeof(float));
        for (int64_t t = 0; t < n; ++t) {
          if (rows.starts_document(t0 + t))
            std::fill(states.begin() + (t + 1) * size, states.begin() + (t + 2) * size, 0.0f);
          else
            std::memcpy(states.data() + (t + 1) * size, states.data() + t * size, static_cast<size_t>(size) * 4);
          recurrent_step(states.data() + (t + 1) * size, nullptr, k.data() + t * dk, v.data() + t * dv, g[t], beta[t],
                         nullptr, e.data(), dk, dv);
        }
        for (int64_t t = n - 1; t >= 0; --t) {
          load_row(grad_out, rows.v_offset(t0 + t), dv, d_out.data());
          float dg, dbeta;
          // A document's first token sees a zero state, and passes no gradient to the one before.
          const bool restart = rows.starts_document(t0 + t);
          recurrent_step_backward(restart ? zeros.data() : states.data() + t * size, states.data() + (t + 1) * size,
                                  q.data() + t * dk, k.data() + t * dk, v.data() + t * dv, g[t], beta[t], d_out.data(),
                                  d_state.data(), dq.data(), dkv.data(), dvv.data(), &dg, &dbeta, residual.data(),
                                  e.data(), dk, dv);
          if (restart) std::fill(d_state.begin(), d_state.end(), 0.0f);
          sink.store(rows, t0 + t, dq.data(), dkv.data(), dvv.data(), dg, dbeta);
        }
      }
      sink.store_initial_state(rows, d_state.data());
    }
  });
  (void)grads;
}

// ---- chunked ----

// The buffers of one chunk (n <= C tokens) and what both passes compute from
// its inputs and start state.
struct Chunk {
  int64_t capacity, dk, dv, n = 0;
  std::vector<float> q, k, v, g, beta;  // inputs; g becomes the cumulative G
  std::vector<float> kt;                // K^T [Dk, n]
  std::vector<float> d;                 // D[t,s] = exp(Gt - Gs) for s <= t in one document, else 0 [n, n]
  std::vector<float> gamma;             // exp(Gt), 0 once a document started inside the chunk at or before t
  std::vector<int64_t> document;        // documents started inside the chunk at or before t
  std::vector<float> kk, a;             // D o KK^T and A = diag(beta) that, strictly lower [n, n]
  std::vector<float> ks, r, u;          // K S0, V - diag(gamma) K S0, U [n, Dv]
  std::vector<float> weighted_kt;       // (diag(exp(Gn - G)) K)^T [Dk, n]

  Chunk(int64_t c, int64_t kdim, int64_t vdim)
      : capacity(c),
        dk(kdim),
        dv(vdim),
        q(c * kdim),
        k(c * kdim),
        v(c * vdim),
        g(c),
        beta(c),
        kt(kdim * c),
        d(c * c),
        gamma(c),
        document(c),
        kk(c * c),
        a(c * c),
        ks(c * vdim),
        r(c * vdim),
        u(c * vdim),
        weighted_kt(kdim * c) {}

  float decay(int64_t t, int64_t s) const { return d[t * n + s]; }

  // Loads tokens [t0, t0 + count) and computes A, R and U from the start state.
  void prepare(const HeadRows& rows, int64_t t0, int64_t count, const float* start, bool with_q) {
    n = count;
    rows.load(t0, n, with_q ? q.data() : nullptr, k.data(), v.data(), g.data(), beta.data());
    for (int64_t t = 1; t < n; ++t) g[t] += g[t - 1];
    // Packed documents: a restart inside the chunk cuts every path through it,
    // so D is zero across documents and S0 reaches no token after a restart.
    for (int64_t t = 0; t < n; ++t) {
      document[t] = (t > 0 ? document[t - 1] : 0) + (rows.starts_document(t0 + t) ? 1 : 0);
      gamma[t] = document[t] == 0 ? std::exp(g[t]) : 0.0f;
    }
    for (int64_t t = 0; t < n; ++t) {
      float* row = d.data() + t * n;
      const float gt = g[t];
      const int64_t* doc = document.data();
      const int64_t doc_t = document[t];
#pragma omp simd
      for (int64_t s = 0; s < n; ++s) row[s] = s <= t && doc[s] == doc_t ? fast_exp(gt - g[s]) : 0.0f;
    }
    transpose(n, dk, k.data(), dk, kt.data());
    std::fill(kk.begin(), kk.begin() + n * n, 0.0f);
    gemm_acc(n, n, dk, k.data(), dk, kt.data(), n, kk.data(), n);
    for (int64_t t = 0; t < n; ++t) {
      const float* row = d.data() + t * n;
#pragma omp simd
      for (int64_t s = 0; s < n; ++s) {
        kk[t * n + s] = s < t ? kk[t * n + s] * row[s] : 0.0f;
        a[t * n + s] = beta[t] * kk[t * n + s];
      }
    }
    std::fill(ks.begin(), ks.begin() + n * dv, 0.0f);
    gemm_acc(n, dv, dk, k.data(), dk, start, dv, ks.data(), dv);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < dv; ++j) {
        r[t * dv + j] = v[t * dv + j] - gamma[t] * ks[t * dv + j];
        u[t * dv + j] = beta[t] * r[t * dv + j];
      }
      for (int64_t s = 0; s < t; ++s) axpy(-a[t * n + s], u.data() + s * dv, u.data() + t * dv, dv);
    }
    const float* to_end = d.data() + (n - 1) * n;  // exp(Gn - Gt)
    for (int64_t i = 0; i < dk; ++i)
#pragma omp simd
      for (int64_t t = 0; t < n; ++t) weighted_kt[i * n + t] = kt[i * n + t] * to_end[t];
  }

  // state <- gamma_n state + K^T diag(exp(Gn - G)) U
  void advance(float* state) const {
    const float gamma_n = gamma[n - 1];
    for (int64_t i = 0; i < dk * dv; ++i) state[i] *= gamma_n;
    gemm_acc(dk, dv, n, weighted_kt.data(), n, u.data(), dv, state, dv);
  }
};

void chunked_forward(const DeltaRuleOutput& result, const DeltaRuleInputs& in, const DeltaRuleOptions& options) {
  const HeadRows shape(in, options);
  const int64_t c = options.chunk_size;
  parallel_for(in.v.size(0) * shape.value_heads, 1, [&](int64_t begin, int64_t end) {
    HeadRows rows(in, options);
    const int64_t dk = rows.dk, dv = rows.dv;
    Chunk chunk(c, dk, dv);
    std::vector<float> state(dk * dv), qk(c * c), out(c * dv);
    for (int64_t item = begin; item < end; ++item) {
      rows.select(item);
      rows.load_initial_state(state.data());
      for (int64_t t0 = 0; t0 < rows.tokens; t0 += c) {
        const int64_t n = std::min(c, rows.tokens - t0);
        chunk.prepare(rows, t0, n, state.data(), true);
        // out = diag(gamma) Q S0 + (D o QK^T, s <= t) U
        std::fill(out.begin(), out.begin() + n * dv, 0.0f);
        gemm_acc(n, dv, dk, chunk.q.data(), dk, state.data(), dv, out.data(), dv);
        std::fill(qk.begin(), qk.begin() + n * n, 0.0f);
        gemm_acc(n, n, dk, chunk.q.data(), dk, chunk.kt.data(), n, qk.data(), n);
        for (int64_t t = 0; t < n; ++t) {
          const float gamma = chunk.gamma[t];
          for (int64_t j = 0; j < dv; ++j) out[t * dv + j] *= gamma;
          const float* decay = chunk.d.data() + t * n;  // zero above the diagonal
#pragma omp simd
          for (int64_t s = 0; s < n; ++s) qk[t * n + s] *= decay[s];
        }
        gemm_acc(n, dv, n, qk.data(), n, chunk.u.data(), dv, out.data(), dv);
        for (int64_t t = 0; t < n; ++t) store_row(result.out, rows.v_offset(t0 + t), dv, out.data() + t * dv);
        chunk.advance(state.data());
      }
      std::memcpy(result.final_state.data<float>() + rows.state_offset(), state.data(),
                  static_cast<size_t>(dk * dv) * sizeof(float));
    }
  });
}

// The backward of one chunk: d_state arrives as the gradient of the chunk's
// end state and leaves as that of its start state S0.
struct ChunkBackward {
  int64_t c, dk, dv;
  std::vector<float> d_out, du, dr, dq, dk_rows, dv_rows, dG, dbeta;
  std::vector<float> p, dp, work_nn, work_t, st, d_state_t, ut, qt, d_start;

  ChunkBackward(int64_t chunk, int64_t kdim, int64_t vdim)
      : c(chunk),
        dk(kdim),
        dv(vdim),
        d_out(chunk * vdim),
        du(chunk * vdim),
        dr(chunk * vdim),
        dq(chunk * kdim),
        dk_rows(chunk * kdim),
        dv_rows(chunk * vdim),
        dG(chunk),
        dbeta(chunk),
        p(chunk * chunk),
        dp(chunk * chunk),
        work_nn(chunk * chunk),
        work_t(std::max(kdim, vdim) * chunk),
        st(vdim * kdim),
        d_state_t(vdim * kdim),
        ut(vdim * chunk),
        qt(kdim * chunk),
        d_start(kdim * vdim) {}

  void run(const Chunk& ch, const float* start, float* d_state) {
    const int64_t n = ch.n;
    std::fill(dG.begin(), dG.end(), 0.0f);
    std::fill(dbeta.begin(), dbeta.end(), 0.0f);
    std::fill(dq.begin(), dq.begin() + n * dk, 0.0f);
    std::fill(dk_rows.begin(), dk_rows.begin() + n * dk, 0.0f);
    std::fill(du.begin(), du.begin() + n * dv, 0.0f);
    const float gamma_n = ch.gamma[n - 1];
    transpose(dk, dv, start, dv, st.data());           // S0^T [Dv, Dk]
    transpose(dk, dv, d_state, dv, d_state_t.data());  // dSn^T [Dv, Dk]
    transpose(n, dv, ch.u.data(), dv, ut.data());      // U^T [Dv, n]
    // S_n = gamma_n S0 + K^T diag(e) U, e_t = exp(Gn - Gt).
    for (int64_t i = 0; i < dk * dv; ++i) d_start[i] = gamma_n * d_state[i];
    dG[n - 1] += gamma_n * dot(start, d_state, dk * dv);
    gemm_acc(n, dv, dk, ch.k.data(), dk, d_state, dv, du.data(), dv);                // K dSn
    gemm_acc(n, dk, dv, ch.u.data(), dv, d_state_t.data(), dk, dk_rows.data(), dk);  // U dSn^T
    for (int64_t t = 0; t < n; ++t) {
      const float e = ch.d[(n - 1) * n + t];
      const float de = e * dot(dk_rows.data() + t * dk, ch.k.data() + t * dk, dk);
      dG[n - 1] += de;
      dG[t] -= de;
      for (int64_t j = 0; j < dv; ++j) du[t * dv + j] *= e;
      for (int64_t i = 0; i < dk; ++i) dk_rows[t * dk + i] *= e;
    }
    // O = diag(gamma) Q S0 + P U, P = (D o QK^T, s <= t).
    std::fill(p.begin(), p.begin() + n * n, 0.0f);
    gemm_acc(n, n, dk, ch.q.data(), dk, ch.kt.data(), n, p.data(), n);
    std::fill(dp.begin(), dp.begin() + n * n, 0.0f);
    gemm_acc(n, n, dv, d_out.data(), dv, ut.data(), n, dp.data(), n);  // dO U^T
    for (int64_t t = 0; t < n; ++t)
      for (int64_t s = 0; s < n; ++s) {
        p[t * n + s] *= ch.decay(t, s);  // zero above the diagonal
        dp[t * n + s] = s <= t ? dp[t * n + s] : 0.0f;
        const float z = dp[t * n + s] * p[t * n + s];  // through D
        dG[t] += z;
        dG[s] -= z;
      }
    transpose(n, n, p.data(), n, work_nn.data());  // P^T
    gemm_acc(n, dv, n, work_nn.data(), n, d_out.data(), dv, du.data(), dv);
    gemm_acc(n, dk, dv, d_out.data(), dv, st.data(), dk, dq.data(), dk);  // dO S0^T, times gamma below
    for (int64_t t = 0; t < n; ++t) {
      const float gamma = ch.gamma[t];
      for (int64_t i = 0; i < dk; ++i) dq[t * dk + i] *= gamma;
      dG[t] += dot(dq.data() + t * dk, ch.q.data() + t * dk, dk);
      for (int64_t i = 0; i < dk; ++i) qt[i * n + t] = gamma * ch.q[t * dk + i];
    }
    gemm_acc(dk, dv, n, qt.data(), n, d_out.data(), dv, d_start.data(), dv);  // Q^T diag(gamma) dO
    for (int64_t t = 0; t < n; ++t)
      for (int64_t s = 0; s < n; ++s) dp[t * n + s] *= ch.decay(t, s);
    gemm_acc(n, dk, n, dp.data(), n, ch.k.data(), dk, dq.data(), dk);  // dQK K
    transpose(n, n, dp.data(), n, work_nn.data());
    gemm_acc(n, dk, n, work_nn.data(), n, ch.q.data(), dk, dk_rows.data(), dk);  // dQK^T Q
    // U = (I + A)^-1 R: dR = (I + A)^-T dU (back substitution), dA = -dR U^T (s < t).
    std::copy(du.begin(), du.begin() + n * dv, dr.begin());
    for (int64_t t = n - 1; t >= 0; --t)
      for (int64_t s = t + 1; s < n; ++s) axpy(-ch.a[s * n + t], dr.data() + s * dv, dr.data() + t * dv, dv);
    std::fill(work_nn.begin(), work_nn.begin() + n * n, 0.0f);
    gemm_acc(n, n, dv, dr.data(), dv, ut.data(), n, work_nn.data(), n);  // dR U^T
    // R = diag(beta) (V - diag(gamma) K S0)
    for (int64_t t = 0; t < n; ++t) {
      const float gamma = ch.gamma[t], b = ch.beta[t];
      const float* drow = dr.data() + t * dv;
      dbeta[t] += dot(drow, ch.r.data() + t * dv, dv);
      dG[t] -= b * gamma * dot(drow, ch.ks.data() + t * dv, dv);
      for (int64_t j = 0; j < dv; ++j) {
        dv_rows[t * dv + j] = b * drow[j];
        dr[t * dv + j] = -b * gamma * drow[j];  // now d(K S0)
      }
    }
    gemm_acc(n, dk, dv, dr.data(), dv, st.data(), dk, dk_rows.data(), dk);  // d(KS0) S0^T
    transpose(n, dk, ch.k.data(), dk, work_t.data());                       // K^T [Dk, n]
    gemm_acc(dk, dv, n, work_t.data(), n, dr.data(), dv, d_start.data(), dv);
    // A[t,s] = beta_t D[t,s] k_t.k_s (s < t); dA = -dR U^T.
    for (int64_t t = 0; t < n; ++t)
      for (int64_t s = 0; s < n; ++s) {
        if (s >= t) {
          work_nn[t * n + s] = 0.0f;
          continue;
        }
        const float d_a = -work_nn[t * n + s];
        dbeta[t] += d_a * ch.kk[t * n + s];
        const float z = d_a * ch.a[t * n + s];
        dG[t] += z;
        dG[s] -= z;
        work_nn[t * n + s] = d_a * ch.beta[t] * ch.decay(t, s);  // d(k_t.k_s)
      }
    gemm_acc(n, dk, n, work_nn.data(), n, ch.k.data(), dk, dk_rows.data(), dk);
    transpose(n, n, work_nn.data(), n, p.data());
    gemm_acc(n, dk, n, p.data(), n, ch.k.data(), dk, dk_rows.data(), dk);
    // G_t = g_1 + ... + g_t: dg_t = sum over u >= t of dG_u.
    for (int64_t t = n - 2; t >= 0; --t) dG[t] += dG[t + 1];
    std::copy(d_start.begin(), d_start.end(), d_state);
  }
};

void chunked_backward(const DeltaRuleGrads& grads, const Tensor& grad_out, const Tensor& grad_final_state,
                      const DeltaRuleInputs& in, const DeltaRuleOptions& options, const HeadGrads& sink) {
  const HeadRows shape(in, options);
  const int64_t c = options.chunk_size;
  parallel_for(in.v.size(0) * shape.value_heads, 1, [&](int64_t begin, int64_t end) {
    HeadRows rows(in, options);
    const int64_t dk = rows.dk, dv = rows.dv, size = dk * dv, tokens = rows.tokens;
    const int64_t chunks = (tokens + c - 1) / c;
    Chunk chunk(c, dk, dv);
    ChunkBackward back(c, dk, dv);
    std::vector<float> starts(static_cast<size_t>(std::max<int64_t>(chunks, 1) * size)), d_state(size);
    for (int64_t item = begin; item < end; ++item) {
      rows.select(item);
      rows.load_initial_state(starts.data());
      for (int64_t i = 0; i + 1 < chunks; ++i) {  // recompute the chunk start states
        chunk.prepare(rows, i * c, c, starts.data() + i * size, false);
        std::memcpy(starts.data() + (i + 1) * size, starts.data() + i * size, static_cast<size_t>(size) * 4);
        chunk.advance(starts.data() + (i + 1) * size);
      }
      if (grad_final_state.defined())
        std::memcpy(d_state.data(), grad_final_state.data<float>() + rows.state_offset(),
                    static_cast<size_t>(size) * sizeof(float));
      else
        std::fill(d_state.begin(), d_state.end(), 0.0f);
      for (int64_t i = chunks - 1; i >= 0; --i) {
        const int64_t t0 = i * c, n = std::min(c, tokens - t0);
        chunk.prepare(rows, t0, n, starts.data() + i * size, true);
        for (int64_t t = 0; t < n; ++t) load_row(grad_out, rows.v_offset(t0 + t), dv, back.d_out.data() + t * dv);
        back.run(chunk, starts.data() + i * size, d_state.data());
        for (int64_t t = 0; t < n; ++t)
          sink.store(rows, t0 + t, back.dq.data() + t * dk, back.dk_rows.data() + t * dk, back.dv_rows.data() + t * dv,
                     back.dG[t], back.dbeta[t]);
      }
      sink.store_initial_state(rows, d_state.data());
    }
  });
  (void)grads;
}

// ---- the table entries ----

void delta_rule_kernel(const DeltaRuleOutput& result, const DeltaRuleInputs& in, const DeltaRuleOptions& options) {
  dispatch_float("gated_delta_rule", in.q.dtype(), [](auto) {});  // f32 or bf16, else the op's error
  if (in.q.size(1) == 0) {
    if (in.initial_state.defined())
      std::memcpy(result.final_state.data<float>(), in.initial_state.data<float>(),
                  static_cast<size_t>(result.final_state.numel()) * sizeof(float));
    else
      std::memset(result.final_state.data<float>(), 0, static_cast<size_t>(result.final_state.numel()) * 4);
    return;
  }
  if (options.algorithm == DeltaRuleAlgorithm::chunked)
    chunked_forward(result, in, options);
  else
    recurrent_forward(result, in, options);
}

void delta_rule_backward_kernel(const DeltaRuleGrads& grads, const Tensor& grad_out, const Tensor& grad_final_state,
                                const DeltaRuleInputs& in, const DeltaRuleOptions& options) {
  dispatch_float("gated_delta_rule_backward", in.q.dtype(), [](auto) {});
  const int64_t rows = in.v.size(0) * in.v.size(1) * in.v.size(2), dk = in.q.size(3);
  std::vector<float> dq_scratch(static_cast<size_t>(rows * dk)), dk_scratch(static_cast<size_t>(rows * dk));
  const HeadGrads sink{grads, dq_scratch.data(), dk_scratch.data()};
  if (in.q.size(1) == 0) {
    if (grads.grad_initial_state.defined()) {
      float* dst = grads.grad_initial_state.data<float>();
      const int64_t size = grads.grad_initial_state.numel();
      if (grad_final_state.defined())
        std::memcpy(dst, grad_final_state.data<float>(), static_cast<size_t>(size) * sizeof(float));
      else
        std::fill(dst, dst + size, 0.0f);
    }
    return;
  }
  if (options.algorithm == DeltaRuleAlgorithm::chunked)
    chunked_backward(grads, grad_out, grad_final_state, in, options, sink);
  else
    recurrent_backward(grads, grad_out, grad_final_state, in, options, sink);
  finish_qk_grads(in, options, grads, dq_scratch.data(), dk_scratch.data());
}

}  // namespace

void register_delta_rule() {
  delta_rule_kernels.set_kernel(DeviceType::cpu, delta_rule_kernel);
  delta_rule_backward_kernels.set_kernel(DeviceType::cpu, delta_rule_backward_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
