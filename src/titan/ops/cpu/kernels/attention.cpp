// CPU flash attention (the FlashAttention-2 algorithm), forward and backward,
// on [B, S, H, D] tensors in f32 or bf16: f32 math, every output rounded once.
// Tile products go to oneDNN's dnnl_sgemm, which runs single-threaded inside
// our parallel regions; everything else here is the tiling around it.
//
// Forward: one task per (batch, head, block of kBlockQ queries). It walks the
// key blocks the mask can reach, forms S = scale * Q K^T for one
// kBlockQ x kBlockK tile, folds it into each row's running max m and sum l
// (online softmax: when m grows, l and the O row are rescaled by
// exp(m_old - m_new)) and adds P V to an f32 O tile; at the end O /= l and
// lse = m + log l. The [Sq, Sk] scores never exist: a thread holds five tiles.
//
// Backward: D_i = rowsum(dO_i * O_i), then P = exp(S - lse) and
// dS = P * (dO V^T - D) are recomputed tile by tile, in one of two schemes:
//  - fused (FlashAttention-2's sweep): one task per (batch, kv head) walks the
//    key blocks; for each it sums dV += P^T dO and dK += scale * dS^T Q over
//    the group's query heads and the query blocks that see it, and adds
//    scale * dS K to f32 dQ accumulators of its own heads. 5 tile GEMMs per
//    tile, but only B * Hkv tasks, and [group, Sq, D] f32 per thread (all
//    threads together: at most one f32 copy of q).
//  - two passes: the same dK/dV work with one task per (batch, kv head, key
//    block), then one task per (batch, head, query block) recomputes S and dP
//    for dQ += scale * dS K. 7 tile GEMMs per tile, many more tasks, tiles only.
// Fused is taken unless B * Hkv tasks would leave threads idle long enough to
// lose more than the two extra GEMMs (fused_backward_pays). Either way every
// gradient row is summed by one task in a fixed order, with no atomics: dK and
// dV by the same code in both schemes, and dQ by the same tile GEMMs into
// [rows, D] f32 accumulators in ascending key-block order. So the scheme, and
// with it the thread count, does not change a bit of the result (checked by
// tests/ops/attention_test.cpp). FlashAttention-2 parallelises over key blocks
// and adds dQ atomically instead; that is neither deterministic nor cheap on
// CPUs.
//
// Values may be narrower or wider than queries and keys (Dv != D, DeepSeek's
// MLA): the score GEMMs run over D, the products with V and dO over Dv, and
// each tile is as wide as the tensor it holds.
//
// Tiles: 128 x 128. Measured single-threaded on AVX-512 (f32, D = 64,
// S = 2048, causal), forward and backward were fastest at 128 x 128 (64 x 64
// tiles ran 20% slower, 256 x 128 and 128 x 256 no faster): dnnl_sgemm reaches
// about its large-GEMM rate on 128 x 128 x D products but only ~70% of it on
// 64 x 64 x 64 ones, whose packing and call overheads weigh more, and the
// elementwise work per tile is the same per score either way. A thread's
// backward tiles take 320 KiB at D = 64 and 512 KiB at D = 128, inside a 1 MiB
// L2. The cost of large tiles is the causal diagonal: half of each diagonal
// tile is masked work, 25% extra at S = 512 and 3% at S = 4096.
//
// Masks skip whole tiles: causal ends the key loop at the block of the tile's
// last query, a sliding window starts it at the block holding the first
// query's oldest visible key (and the backward's query loops likewise), and
// document ids are summarised per block as a [min, max] range so that a tile
// whose query and key ranges do not overlap is skipped without looking at its
// elements. Packed documents have non-decreasing ids, which keeps the ranges
// tight; other ids stay correct, as a tile that cannot be skipped is masked
// element by element. A tile the mask shows entirely is not masked at all.
//
// NaN and Inf reach exactly the results PyTorch's reference gives them: a
// NaN score (a NaN query or key) makes its row NaN, even a row whose scores
// are all NaN (not "no visible key": that is a max of -inf with every score
// -inf), and its lse NaN, so the backward spreads it too. Hidden pairs add
// nothing: probabilities and dS of hidden pairs are stored as -0.0, and a
// partially visible tile whose other GEMM operand holds a non-finite value
// (a NaN value row, query or upstream gradient) is multiplied by
// masked_product, which skips those pairs, since a GEMM's 0 * NaN would carry
// the NaN to queries that cannot see the key. The check costs one pass over
// a [128, D] tile; the GEMMs stay as they are when everything is finite.
//
// Soft-capping (mask.logit_softcap = c > 0, Gemma 2) replaces each scaled
// score s of a tile by z = c tanh(s / c) right after its GEMM, before the mask
// and the softmax, so lse is that of the capped scores. The backward caps its
// recomputed scores the same way and multiplies dZ = P (dP - D) by
// dz/ds = 1 - (z / c)^2 to get dS. Both are extra passes taken per tile only
// when c > 0: the uncapped loops are the ones above, unchanged.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "titan/core/error.h"
#include "titan/ops/attention.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

constexpr int64_t kBlockQ = 128;
constexpr int64_t kBlockK = 128;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Geometry {
  int64_t batch, q_len, k_len, heads, kv_heads, group, dim, value_dim;  // dim: q/k's head dim; value_dim: v's
  int64_t q_offset;  // position of query 0 relative to key 0 (k_len - q_len unless the mask places it)
  int64_t q_blocks, k_blocks;
  // Elements between consecutive positions of one head: in q (and grad_q), k, v and out (and grad_out).
  int64_t q_row, kv_row, v_row, out_row;

  Geometry(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask)
      : batch(q.size(0)),
        q_len(q.size(1)),
        k_len(k.size(1)),
        heads(q.size(2)),
        kv_heads(k.size(2)),
        group(q.size(2) / k.size(2)),
        dim(q.size(3)),
        value_dim(v.size(3)),
        q_offset(mask.query_offset(q.size(1), k.size(1))),
        q_blocks((q.size(1) + kBlockQ - 1) / kBlockQ),
        k_blocks((k.size(1) + kBlockK - 1) / kBlockK),
        q_row(q.size(2) * q.size(3)),
        kv_row(k.size(2) * k.size(3)),
        v_row(v.size(2) * v.size(3)),
        out_row(q.size(2) * v.size(3)) {}

  int64_t q_rows(int64_t qb) const { return std::min(kBlockQ, q_len - qb * kBlockQ); }
  int64_t k_rows(int64_t kb) const { return std::min(kBlockK, k_len - kb * kBlockK); }
};

enum class Visibility { none, partial, all };

// The mask of ops/attention.h at tile granularity: which blocks can hold a
// visible key, whether a tile is hidden, partly or wholly visible, and the
// element-wise mask of a partial tile.
class BlockMask {
 public:
  BlockMask(const AttentionMask& mask, const Geometry& g) : g_(g), causal_(mask.causal), window_(mask.sliding_window) {
    if (!mask.document_ids.defined()) return;
    key_docs_ = DocumentIds(mask.document_ids);
    // Without their own ids, queries read the keys' ids at their positions.
    query_docs_ = mask.query_document_ids.defined() ? DocumentIds(mask.query_document_ids) : key_docs_;
    const int64_t query_shift = mask.query_document_ids.defined() ? 0 : g.q_offset;
    const int64_t query_stride = mask.query_document_ids.defined() ? g.q_len : g.k_len;
    const auto summarise = [&](const DocumentIds& ids, int64_t stride, int64_t blocks, int64_t block,
                               int64_t first_index, int64_t end_index, std::vector<int64_t>& lo,
                               std::vector<int64_t>& hi) {
      lo.assign(static_cast<size_t>(g.batch * blocks), 0);
      hi.assign(static_cast<size_t>(g.batch * blocks), 0);
      for (int64_t b = 0; b < g.batch; ++b) {
        for (int64_t i = 0; i < blocks; ++i) {
          const int64_t begin = first_index + i * block, end = std::min(end_index, begin + block);
          int64_t low = ids(b * stride + begin), high = low;
          for (int64_t p = begin + 1; p < end; ++p) {
            low = std::min(low, ids(b * stride + p));
            high = std::max(high, ids(b * stride + p));
          }
          lo[static_cast<size_t>(b * blocks + i)] = low;
          hi[static_cast<size_t>(b * blocks + i)] = high;
        }
      }
    };
    query_doc_base_ = query_shift;
    query_doc_stride_ = query_stride;
    summarise(query_docs_, query_stride, g.q_blocks, kBlockQ, query_shift, query_shift + g.q_len, q_doc_lo_, q_doc_hi_);
    summarise(key_docs_, g.k_len, g.k_blocks, kBlockK, 0, g.k_len, k_doc_lo_, k_doc_hi_);
  }

  // Key blocks [first, end) that can hold a key visible from query block qb
  // (queries placed by the mask may lie before or after every key).
  std::pair<int64_t, int64_t> key_blocks(int64_t qb) const {
    const int64_t first_query = q_position(qb), last_query = first_query + g_.q_rows(qb) - 1;
    const int64_t first =
        window_ > 0 ? std::min(g_.k_blocks, std::max<int64_t>(0, first_query - window_ + 1) / kBlockK) : 0;
    const int64_t end = causal_ ? (last_query < 0 ? 0 : std::min(g_.k_blocks, last_query / kBlockK + 1)) : g_.k_blocks;
    return {std::min(first, end), end};
  }

  // Query blocks [first, end) that can see a key of key block kb.
  std::pair<int64_t, int64_t> query_blocks(int64_t kb) const {
    const int64_t first_key = kb * kBlockK, last_key = first_key + g_.k_rows(kb) - 1;
    // Query index i sits at position q_offset + i.
    const int64_t first = causal_ ? std::min(g_.q_blocks, std::max<int64_t>(0, first_key - g_.q_offset) / kBlockQ) : 0;
    int64_t end = g_.q_blocks;
    if (window_ > 0) {
      const int64_t last_query = last_key + window_ - 1 - g_.q_offset;  // the latest query still in reach
      end = last_query < 0 ? 0 : std::min(end, last_query / kBlockQ + 1);
    }
    return {std::min(first, end), end};
  }

  Visibility classify(int64_t b, int64_t qb, int64_t kb) const {
    const int64_t first_query = q_position(qb), last_query = first_query + g_.q_rows(qb) - 1;
    const int64_t first_key = kb * kBlockK, last_key = first_key + g_.k_rows(kb) - 1;
    bool all = true;
    if (causal_) {
      if (first_key > last_query) return Visibility::none;
      all = all && last_key <= first_query;
    }
    if (window_ > 0) {
      if (first_query - last_key >= window_) return Visibility::none;
      all = all && last_query - first_key < window_;
    }
    if (has_docs()) {
      const int64_t q_lo = q_doc_lo_[static_cast<size_t>(b * g_.q_blocks + qb)];
      const int64_t q_hi = q_doc_hi_[static_cast<size_t>(b * g_.q_blocks + qb)];
      const int64_t k_lo = k_doc_lo_[static_cast<size_t>(b * g_.k_blocks + kb)];
      const int64_t k_hi = k_doc_hi_[static_cast<size_t>(b * g_.k_blocks + kb)];
      if (q_hi < k_lo || k_hi < q_lo) return Visibility::none;
      all = all && q_lo == q_hi && k_lo == k_hi && q_lo == k_lo;
    }
    return all ? Visibility::all : Visibility::partial;
  }

  // Sets the hidden scores of a partially visible tile (row stride kBlockK) to
  // -inf. Causal and window masks leave each query an interval of keys; with no
  // document ids every id compares equal (all zero), keeping the loop branch-free.
  void hide(int64_t b, int64_t qb, int64_t kb, float* scores) const {
    const int64_t rows = g_.q_rows(qb), cols = g_.k_rows(kb);
    const int64_t first_query = q_position(qb), first_key = kb * kBlockK;
    int64_t key_docs[kBlockK] = {};
    if (has_docs()) {
      for (int64_t c = 0; c < cols; ++c) key_docs[c] = key_docs_(b * g_.k_len + first_key + c);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t query = first_query + r;
      const int64_t query_doc = has_docs() ? query_doc_at(b, qb * kBlockQ + r) : 0;
      const int64_t lowest = window_ > 0 ? query - window_ + 1 : 0;
      const int64_t highest = causal_ ? query : g_.k_len;
      float* row = scores + r * kBlockK;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t key = first_key + c;
        const bool hidden = (key < lowest) | (key > highest) | (key_docs[c] != query_doc);
        row[c] = hidden ? kNegInf : row[c];
      }
    }
  }

 private:
  // Document ids of either dtype, read by flat index.
  class DocumentIds {
   public:
    DocumentIds() = default;
    explicit DocumentIds(const Tensor& ids) {
      if (ids.dtype() == DType::i32) {
        ids32_ = ids.data<int32_t>();
      } else {
        ids64_ = ids.data<int64_t>();
      }
    }
    bool defined() const { return ids32_ != nullptr || ids64_ != nullptr; }
    int64_t operator()(int64_t index) const { return ids32_ != nullptr ? ids32_[index] : ids64_[index]; }

   private:
    const int32_t* ids32_ = nullptr;
    const int64_t* ids64_ = nullptr;
  };

  bool has_docs() const { return key_docs_.defined(); }
  // The document id of query index i.
  int64_t query_doc_at(int64_t b, int64_t i) const { return query_docs_(b * query_doc_stride_ + query_doc_base_ + i); }
  int64_t q_position(int64_t qb) const { return g_.q_offset + qb * kBlockQ; }

  const Geometry& g_;
  bool causal_;
  int64_t window_;
  DocumentIds key_docs_, query_docs_;
  int64_t query_doc_base_ = 0, query_doc_stride_ = 0;
  // Per (batch, block): the smallest and largest document id of the block's positions.
  std::vector<int64_t> q_doc_lo_, q_doc_hi_, k_doc_lo_, k_doc_hi_;
};

// Threads to use for `tasks` independent tasks. Always at least two when
// OpenMP offers two, even for one task: dnnl_sgemm runs single-threaded only
// inside an *active* parallel region, and a GEMM that split its sum across
// threads would round differently from one that did not.
int worker_threads(int64_t tasks) {
  if (omp_in_parallel()) return 1;
  const int available = omp_get_max_threads();
  if (available <= 1) return 1;
  return static_cast<int>(std::clamp<int64_t>(tasks, 2, available));
}

// Runs body(task, thread) for every task in [0, tasks). Dynamic scheduling
// balances causal masks, whose tasks differ in cost; callers number tasks
// heaviest first. A task's result does not depend on the thread that runs it.
template <typename Body>
void for_each_task(int64_t tasks, int threads, Body&& body) {
#pragma omp parallel num_threads(threads)
  {
    const int thread = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) body(task, thread);
  }
}

// Per-thread f32 work space, allocated as one tensor before the parallel
// region (it shows in the allocator's statistics, and allocating never throws
// inside the region). Each thread's slice starts on a 64-byte line.
class Scratch {
 public:
  Scratch(int threads, int64_t floats_per_thread)
      : stride_((floats_per_thread + 15) / 16 * 16), buffer_(Tensor::empty({threads * stride_})) {}
  float* thread(int index) const { return buffer_.data<float>() + index * stride_; }

 private:
  int64_t stride_;
  Tensor buffer_;
};

// dnnl_sgemm cannot fail on the arguments below (they are valid by
// construction), but if it ever did we must not throw inside the parallel
// region: the failure is recorded and raised after it.
class Gemm {
 public:
  // C = alpha * op(A) op(B) + beta * C, all row-major.
  void operator()(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    // BLAS wants leading dimensions >= 1 even when a head dim of 0 makes them 0.
    const auto ld = [](int64_t value) { return std::max<int64_t>(value, 1); };
    if (dnnl_sgemm(trans_a, trans_b, m, n, k, alpha, a, ld(lda), b, ld(ldb), beta, c, ld(ldc)) != dnnl_success) {
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  void check(const char* op) const { TITAN_CHECK(!failed_.load(), "{}: oneDNN sgemm failed on a tile", op); }

 private:
  std::atomic<bool> failed_{false};
};

// `rows` rows of one head (consecutive positions `row_stride` apart) copied to a
// dense f32 tile [rows, dim]. f32 input is copied too: handing dnnl_sgemm the
// strided rows in place measured no faster (it packs its operands anyway), and
// one path then serves both dtypes.
template <typename T>
void load_tile(const T* src, int64_t rows, int64_t row_stride, int64_t dim, float* tile) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* in = src + r * row_stride;
    float* out = tile + r * dim;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) out[d] = to_f32(in[d]);
  }
}

template <typename T>
void store_tile(const float* tile, int64_t rows, int64_t dim, T* dst, int64_t row_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = tile + r * dim;
    T* out = dst + r * row_stride;
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) out[d] = from_f32<T>(in[d]);
  }
}

// cap * tanh(s / cap) through fast_exp, so the loop vectorises: tanh(y) =
// sign(y) (1 - e) / (1 + e) with e = exp(-2|y|) <= 1 never overflows. Its
// absolute error, about cap * 1e-7, is below the rounding of the f32 scores.
inline float soft_capped(float score, float cap, float inverse_cap) {
  const float e = fast_exp(-2.0f * std::fabs(score * inverse_cap));
  return std::copysign(cap * (1.0f - e) / (1.0f + e), score);
}

// Caps the `rows` x `cols` scores of a tile (row stride kBlockK) in place.
void soft_cap_tile(float* scores, int64_t rows, int64_t cols, float cap) {
  const float inverse_cap = 1.0f / cap;
  for (int64_t r = 0; r < rows; ++r) {
    float* s = scores + r * kBlockK;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) s[c] = soft_capped(s[c], cap, inverse_cap);
  }
}

// ---- hidden pairs and non-finite operands ----

// Whether every element of a [rows, cols] tile (row stride ld) is finite: x * 0
// is 0 for finite x and NaN for NaN and +-Inf.
bool all_finite(const float* tile, int64_t rows, int64_t cols, int64_t ld) {
  float probe = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = tile + r * ld;
#pragma omp simd reduction(+ : probe)
    for (int64_t c = 0; c < cols; ++c) probe += x[c] * 0.0f;
  }
  return probe == 0.0f;
}

// A hidden pair's probability or dS, stored as -0.0: +0.0 is a visible pair
// whose probability underflowed, which does multiply its value row.
inline bool hidden_pair(float value) { return value == 0.0f && std::signbit(value); }

// out[m, n] += alpha * A[m, k] B[k, n] (A transposed when transpose_a: stored
// [k, m]) over the pairs A does not mark hidden: the tile GEMM for a partially
// visible tile whose B holds a non-finite value (see the header).
void masked_product(bool transpose_a, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                    const float* b, int64_t ldb, float* out, int64_t ldo) {
  for (int64_t i = 0; i < m; ++i) {
    float* o = out + i * ldo;
    for (int64_t l = 0; l < k; ++l) {
      const float weight = transpose_a ? a[l * lda + i] : a[i * lda + l];
      if (hidden_pair(weight)) continue;
      const float* row = b + l * ldb;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) o[j] += alpha * weight * row[j];
    }
  }
}

// ---- forward ----

// Folds a tile of scores into the running row max and sum, rescales the O rows
// whose max grew, and leaves P = exp(S - m) in place of the scores (-0.0 for a
// hidden pair). A row whose visible scores so far are all NaN gets a NaN max,
// sum and O row (std::max keeps a NaN first argument, so it stays NaN).
void online_softmax(float* scores, int64_t rows, int64_t cols, float* row_max, float* row_sum, float* out,
                    int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s = scores + r * kBlockK;
    float tile_max = kNegInf;
    // Written as a compare-select: GCC does not vectorise std::max in a max reduction.
#pragma omp simd reduction(max : tile_max)
    for (int64_t c = 0; c < cols; ++c) tile_max = s[c] > tile_max ? s[c] : tile_max;
    float new_max = std::max(row_max[r], tile_max);
    if (new_max == kNegInf) {
      bool nan = false;
      for (int64_t c = 0; c < cols; ++c) nan = nan || std::isnan(s[c]);
      if (!nan) {  // no visible key in this row yet: P = 0 (exp(-inf - -inf) would be NaN)
        std::fill(s, s + cols, -0.0f);
        continue;
      }
      new_max = std::numeric_limits<float>::quiet_NaN();
    }
    float tile_sum = 0.0f;
#pragma omp simd reduction(+ : tile_sum)
    for (int64_t c = 0; c < cols; ++c) {
      const float p = s[c] == kNegInf ? -0.0f : fast_exp(s[c] - new_max);
      s[c] = p;
      tile_sum += p;
    }
    const float correction = fast_exp(row_max[r] - new_max);  // 0 for a row that had no visible key
    row_sum[r] = row_sum[r] * correction + tile_sum;
    row_max[r] = new_max;
    if (correction != 1.0f) {
      float* o = out + r * dim;
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) o[d] *= correction;
    }
  }
}

template <typename T>
void forward(const AttentionOutput& result, const Tensor& q, const Tensor& k, const Tensor& v,
             const AttentionMask& mask, float scale) {
  const Geometry g(q, k, v, mask);
  const BlockMask blocks(mask, g);
  const float cap = mask.logit_softcap;
  const T* q_data = q.data<T>();
  const T* k_data = k.data<T>();
  const T* v_data = v.data<T>();
  T* out_data = result.out.data<T>();
  float* lse_data = result.lse.data<float>();

  const int64_t D = g.dim, DV = g.value_dim, heads_total = g.batch * g.heads;
  const int64_t tasks = heads_total * g.q_blocks;
  const int threads = worker_threads(tasks);
  // Q [kBlockQ, D], O [kBlockQ, Dv]; K [kBlockK, D], V [kBlockK, Dv]; S/P [kBlockQ, kBlockK]; m, l [kBlockQ].
  const Scratch scratch(threads, kBlockQ * (D + DV) + kBlockK * (D + DV) + kBlockQ * kBlockK + 2 * kBlockQ);
  Gemm gemm;

  for_each_task(tasks, threads, [&](int64_t task, int thread) {
    // A head's query blocks run back to back (its K and V stay in cache), the
    // longest rows of a causal mask first.
    const int64_t qb = g.q_blocks - 1 - task % g.q_blocks;
    const int64_t b = task / g.q_blocks / g.heads, h = task / g.q_blocks % g.heads, kvh = h / g.group;
    const int64_t q0 = qb * kBlockQ, q_rows = g.q_rows(qb);
    float* q_tile = scratch.thread(thread);
    float* o_tile = q_tile + kBlockQ * D;
    float* k_tile = o_tile + kBlockQ * DV;
    float* v_tile = k_tile + kBlockK * D;
    float* scores = v_tile + kBlockK * DV;
    float* row_max = scores + kBlockQ * kBlockK;
    float* row_sum = row_max + kBlockQ;

    load_tile(q_data + (b * g.q_len + q0) * g.q_row + h * D, q_rows, g.q_row, D, q_tile);
    std::fill(o_tile, o_tile + q_rows * DV, 0.0f);
    std::fill(row_max, row_max + q_rows, kNegInf);
    std::fill(row_sum, row_sum + q_rows, 0.0f);

    const auto [kb_first, kb_end] = blocks.key_blocks(qb);
    for (int64_t kb = kb_first; kb < kb_end; ++kb) {
      const Visibility visibility = blocks.classify(b, qb, kb);
      if (visibility == Visibility::none) continue;
      const int64_t k0 = kb * kBlockK, k_rows = g.k_rows(kb);
      load_tile(k_data + (b * g.k_len + k0) * g.kv_row + kvh * D, k_rows, g.kv_row, D, k_tile);
      load_tile(v_data + (b * g.k_len + k0) * g.v_row + kvh * DV, k_rows, g.v_row, DV, v_tile);
      gemm('N', 'T', q_rows, k_rows, D, scale, q_tile, D, k_tile, D, 0.0f, scores, kBlockK);
      if (cap > 0.0f) soft_cap_tile(scores, q_rows, k_rows, cap);
      if (visibility == Visibility::partial) blocks.hide(b, qb, kb, scores);
      online_softmax(scores, q_rows, k_rows, row_max, row_sum, o_tile, DV);
      if (visibility == Visibility::partial && !all_finite(v_tile, k_rows, DV, DV)) {
        masked_product(false, q_rows, DV, k_rows, 1.0f, scores, kBlockK, v_tile, DV, o_tile, DV);
      } else {
        gemm('N', 'N', q_rows, DV, k_rows, 1.0f, scores, kBlockK, v_tile, DV, 1.0f, o_tile, DV);
      }
    }

    float* lse_row = lse_data + (b * g.heads + h) * g.q_len + q0;
    for (int64_t r = 0; r < q_rows; ++r) {
      // l >= 1 once any key is visible (the max term contributes exp(0)); a NaN l stays NaN in both.
      const float inverse = row_sum[r] == 0.0f ? 0.0f : 1.0f / row_sum[r];
      lse_row[r] = row_sum[r] == 0.0f ? kNegInf : row_max[r] + std::log(row_sum[r]);
      float* o = o_tile + r * DV;
#pragma omp simd
      for (int64_t d = 0; d < DV; ++d) o[d] *= inverse;
    }
    store_tile(o_tile, q_rows, DV, out_data + (b * g.q_len + q0) * g.out_row + h * DV, g.out_row);
  });
  gemm.check("flash_attention");
}

// ---- backward ----

// Recomputes one tile's P = exp(S - lse) into `probs` and dS = P * (dP - D)
// into `grad_scores` (both [kBlockQ, kBlockK]). Rows with lse = -inf saw no key
// and hidden pairs get P = dS = -0.0 (a NaN lse or D must not reach them).
// With a soft cap, S is the capped score z and dS also takes the factor
// dz/ds = 1 - (z / cap)^2.
void probability_tile(Gemm& gemm, const BlockMask& blocks, Visibility visibility, int64_t b, int64_t qb, int64_t kb,
                      int64_t q_rows, int64_t k_rows, int64_t dim, int64_t value_dim, float scale, float cap,
                      const float* q_tile, const float* grad_out_tile, const float* k_tile, const float* v_tile,
                      const float* lse, const float* delta, float* probs, float* grad_scores) {
  gemm('N', 'T', q_rows, k_rows, dim, scale, q_tile, dim, k_tile, dim, 0.0f, probs, kBlockK);
  if (cap > 0.0f) soft_cap_tile(probs, q_rows, k_rows, cap);
  if (visibility == Visibility::partial) blocks.hide(b, qb, kb, probs);
  gemm('N', 'T', q_rows, k_rows, value_dim, 1.0f, grad_out_tile, value_dim, v_tile, value_dim, 0.0f, grad_scores,
       kBlockK);
  for (int64_t r = 0; r < q_rows; ++r) {
    float* p = probs + r * kBlockK;
    float* ds = grad_scores + r * kBlockK;
    const float row_lse = lse[r], row_delta = delta[r];
    if (row_lse == kNegInf) {
      std::fill(p, p + k_rows, -0.0f);
      std::fill(ds, ds + k_rows, -0.0f);
      continue;
    }
    if (cap > 0.0f) {
      const float inverse_cap = 1.0f / cap;
#pragma omp simd
      for (int64_t c = 0; c < k_rows; ++c) {
        const float z = p[c];
        const float prob = fast_exp(z - row_lse);
        // Clamped: a hidden score (z = -inf) gets t = -1, a factor of 0 and no
        // NaN; |z| <= cap otherwise, up to rounding.
        const float t = std::min(std::max(z * inverse_cap, -1.0f), 1.0f);
        const bool hidden = z == kNegInf;
        p[c] = hidden ? -0.0f : prob;
        ds[c] = hidden ? -0.0f : prob * (ds[c] - row_delta) * (1.0f - t * t);
      }
      continue;
    }
#pragma omp simd
    for (int64_t c = 0; c < k_rows; ++c) {
      const bool hidden = p[c] == kNegInf;
      const float prob = fast_exp(p[c] - row_lse);
      ds[c] = hidden ? -0.0f : prob * (ds[c] - row_delta);
      p[c] = hidden ? -0.0f : prob;
    }
  }
}

// out [m, D] += alpha * A B for a [kBlockQ, kBlockK] tile A (transposed: its
// columns) and a [k, D] tile B: the tile GEMM, or masked_product when hidden
// pairs of a partial tile would meet a non-finite B.
void tile_product(Gemm& gemm, bool partial, bool transpose_a, int64_t m, int64_t dim, int64_t k, float alpha,
                  const float* a, const float* b, float* out) {
  if (partial && !all_finite(b, k, dim, dim)) {
    masked_product(transpose_a, m, dim, k, alpha, a, kBlockK, b, dim, out, dim);
  } else {
    gemm(transpose_a ? 'T' : 'N', 'N', m, dim, k, alpha, a, kBlockK, b, dim, 1.0f, out, dim);
  }
}

// What one backward call shares across its tasks.
template <typename T>
struct BackwardProblem {
  const Geometry& g;
  const BlockMask& blocks;
  float scale;
  float cap;  // the mask's logit_softcap (0: none)
  const T *q, *k, *v, *grad_out;
  const float *lse, *delta;  // [B, Hq, Sq]
  T *grad_q, *grad_k, *grad_v;
  Gemm& gemm;
};

// One thread's tiles: Q [kBlockQ, D], dO [kBlockQ, Dv]; K [kBlockK, D],
// V [kBlockK, Dv]; P, dS [kBlockQ, kBlockK]; two accumulators (acc0: dK or
// dQ, D wide; acc1: dV, Dv wide).
struct BackwardTiles {
  static constexpr int64_t kAccRows = std::max(kBlockQ, kBlockK);
  static int64_t floats(int64_t dim, int64_t value_dim) {
    return (kBlockQ + kBlockK + kAccRows) * (dim + value_dim) + 2 * kBlockQ * kBlockK;
  }
  BackwardTiles(float* base, int64_t dim, int64_t value_dim)
      : q(base),
        grad_out(q + kBlockQ * dim),
        k(grad_out + kBlockQ * value_dim),
        v(k + kBlockK * dim),
        probs(v + kBlockK * value_dim),
        grad_scores(probs + kBlockQ * kBlockK),
        acc0(grad_scores + kBlockQ * kBlockK),
        acc1(acc0 + kAccRows * dim) {}
  float *q, *grad_out, *k, *v, *probs, *grad_scores, *acc0, *acc1;
};

// dK and dV of key block kb of kv head kvh, summed over the group's query
// heads and the query blocks that see it. With `grad_q_acc` ([group] rows of
// `head_stride` floats, f32 [Sq, D] each: the fused scheme) it also adds each
// tile's scale * dS K to dQ there, exactly as query_block_gradient would.
template <typename T>
void key_block_gradients(const BackwardProblem<T>& p, const BackwardTiles& t, int64_t b, int64_t kvh, int64_t kb,
                         float* grad_q_acc, int64_t head_stride) {
  const Geometry& g = p.g;
  const int64_t D = g.dim, DV = g.value_dim, k0 = kb * kBlockK, k_rows = g.k_rows(kb);
  float* grad_k_tile = t.acc0;
  float* grad_v_tile = t.acc1;
  const int64_t k_offset = (b * g.k_len + k0) * g.kv_row + kvh * D;
  const int64_t v_offset = (b * g.k_len + k0) * g.v_row + kvh * DV;
  load_tile(p.k + k_offset, k_rows, g.kv_row, D, t.k);
  load_tile(p.v + v_offset, k_rows, g.v_row, DV, t.v);
  std::fill(grad_k_tile, grad_k_tile + k_rows * D, 0.0f);
  std::fill(grad_v_tile, grad_v_tile + k_rows * DV, 0.0f);
  const auto [qb_first, qb_end] = p.blocks.query_blocks(kb);
  for (int64_t member = 0; member < g.group; ++member) {
    const int64_t h = kvh * g.group + member;
    for (int64_t qb = qb_first; qb < qb_end; ++qb) {
      const Visibility visibility = p.blocks.classify(b, qb, kb);
      if (visibility == Visibility::none) continue;
      const int64_t q0 = qb * kBlockQ, q_rows = g.q_rows(qb);
      const int64_t q_offset = (b * g.q_len + q0) * g.q_row + h * D;
      const int64_t row_offset = (b * g.heads + h) * g.q_len + q0;
      load_tile(p.q + q_offset, q_rows, g.q_row, D, t.q);
      load_tile(p.grad_out + (b * g.q_len + q0) * g.out_row + h * DV, q_rows, g.out_row, DV, t.grad_out);
      probability_tile(p.gemm, p.blocks, visibility, b, qb, kb, q_rows, k_rows, D, DV, p.scale, p.cap, t.q, t.grad_out,
                       t.k, t.v, p.lse + row_offset, p.delta + row_offset, t.probs, t.grad_scores);
      const bool partial = visibility == Visibility::partial;
      tile_product(p.gemm, partial, true, k_rows, DV, q_rows, 1.0f, t.probs, t.grad_out, grad_v_tile);
      tile_product(p.gemm, partial, true, k_rows, D, q_rows, p.scale, t.grad_scores, t.q, grad_k_tile);
      if (grad_q_acc != nullptr) {
        tile_product(p.gemm, partial, false, q_rows, D, k_rows, p.scale, t.grad_scores, t.k,
                     grad_q_acc + member * head_stride + q0 * D);
      }
    }
  }
  store_tile(grad_k_tile, k_rows, D, p.grad_k + k_offset, g.kv_row);
  store_tile(grad_v_tile, k_rows, DV, p.grad_v + v_offset, g.v_row);
}

// dQ of query block qb of head h, summed over the key blocks it sees in order.
template <typename T>
void query_block_gradient(const BackwardProblem<T>& p, const BackwardTiles& t, int64_t b, int64_t h, int64_t qb) {
  const Geometry& g = p.g;
  const int64_t D = g.dim, DV = g.value_dim, kvh = h / g.group, q0 = qb * kBlockQ, q_rows = g.q_rows(qb);
  float* grad_q_tile = t.acc0;
  const int64_t q_offset = (b * g.q_len + q0) * g.q_row + h * D;
  const int64_t row_offset = (b * g.heads + h) * g.q_len + q0;
  load_tile(p.q + q_offset, q_rows, g.q_row, D, t.q);
  load_tile(p.grad_out + (b * g.q_len + q0) * g.out_row + h * DV, q_rows, g.out_row, DV, t.grad_out);
  std::fill(grad_q_tile, grad_q_tile + q_rows * D, 0.0f);
  const auto [kb_first, kb_end] = p.blocks.key_blocks(qb);
  for (int64_t kb = kb_first; kb < kb_end; ++kb) {
    const Visibility visibility = p.blocks.classify(b, qb, kb);
    if (visibility == Visibility::none) continue;
    const int64_t k0 = kb * kBlockK, k_rows = g.k_rows(kb);
    load_tile(p.k + (b * g.k_len + k0) * g.kv_row + kvh * D, k_rows, g.kv_row, D, t.k);
    load_tile(p.v + (b * g.k_len + k0) * g.v_row + kvh * DV, k_rows, g.v_row, DV, t.v);
    probability_tile(p.gemm, p.blocks, visibility, b, qb, kb, q_rows, k_rows, D, DV, p.scale, p.cap, t.q, t.grad_out,
                     t.k, t.v, p.lse + row_offset, p.delta + row_offset, t.probs, t.grad_scores);
    tile_product(p.gemm, visibility == Visibility::partial, false, q_rows, D, k_rows, p.scale, t.grad_scores, t.k,
                 grad_q_tile);
  }
  store_tile(grad_q_tile, q_rows, D, p.grad_q + q_offset, g.q_row);
}

// The fused sweep costs 5 tile GEMMs to the two passes' 7 but has only
// B * Hkv tasks; take it when those tasks keep the threads about as busy.
bool fused_backward_pays(int64_t fused_tasks) {
  const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t rounds = (fused_tasks + threads - 1) / threads;
  return rounds * threads * 5 <= fused_tasks * 7;
}

template <typename T>
void backward(const AttentionGrads& grads, const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& out, const Tensor& lse, const AttentionMask& mask, float scale) {
  const Geometry g(q, k, v, mask);
  const BlockMask blocks(mask, g);
  const int64_t D = g.dim, DV = g.value_dim;
  Gemm gemm;

  // D_i = dO_i . O_i, laid out like lse [B, Hq, Sq].
  const Tensor delta = Tensor::empty({g.batch, g.heads, g.q_len});
  const T* out_data = out.data<T>();
  const T* grad_out_data = grad_out.data<T>();
  float* delta_data = delta.data<float>();
  parallel_for(g.batch * g.q_len, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / g.q_len, i = row % g.q_len;
      for (int64_t h = 0; h < g.heads; ++h) {
        const T* o = out_data + row * g.out_row + h * DV;
        const T* dout = grad_out_data + row * g.out_row + h * DV;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < DV; ++d) dot += to_f32(o[d]) * to_f32(dout[d]);
        delta_data[(b * g.heads + h) * g.q_len + i] = dot;
      }
    }
  });

  const BackwardProblem<T> p{g,
                             blocks,
                             scale,
                             mask.logit_softcap,
                             q.data<T>(),
                             k.data<T>(),
                             v.data<T>(),
                             grad_out_data,
                             lse.data<float>(),
                             delta_data,
                             grads.grad_q.data<T>(),
                             grads.grad_k.data<T>(),
                             grads.grad_v.data<T>(),
                             gemm};
  const int64_t tile_floats = (BackwardTiles::floats(D, DV) + 15) / 16 * 16;
  const int64_t kv_heads_total = g.batch * g.kv_heads;

  if (fused_backward_pays(kv_heads_total)) {
    // One task per (batch, kv head) sweeps every key block; it alone adds to
    // its heads' dQ rows, in f32 [group, Sq, D] (at most one f32 copy of q over
    // all threads, since there are no more threads than tasks).
    const int64_t head_stride = (g.q_len * D + 15) / 16 * 16;
    const int threads = worker_threads(kv_heads_total);
    const Scratch scratch(threads, tile_floats + g.group * head_stride);
    for_each_task(kv_heads_total, threads, [&](int64_t task, int thread) {
      const int64_t b = task / g.kv_heads, kvh = task % g.kv_heads;
      const BackwardTiles tiles(scratch.thread(thread), D, DV);
      float* grad_q_acc = scratch.thread(thread) + tile_floats;
      for (int64_t member = 0; member < g.group; ++member) {
        std::fill(grad_q_acc + member * head_stride, grad_q_acc + member * head_stride + g.q_len * D, 0.0f);
      }
      for (int64_t kb = 0; kb < g.k_blocks; ++kb) {
        key_block_gradients(p, tiles, b, kvh, kb, grad_q_acc, head_stride);
      }
      for (int64_t member = 0; member < g.group; ++member) {
        store_tile(grad_q_acc + member * head_stride, g.q_len, D,
                   p.grad_q + b * g.q_len * g.q_row + (kvh * g.group + member) * D, g.q_row);
      }
    });
  } else {
    const int64_t heads_total = g.batch * g.heads;
    const int threads = worker_threads(std::max(kv_heads_total * g.k_blocks, heads_total * g.q_blocks));
    const Scratch scratch(threads, tile_floats);
    // Task order as in the forward: one head's blocks back to back, the
    // heaviest of a causal mask (early keys, late queries) first.
    for_each_task(kv_heads_total * g.k_blocks, threads, [&](int64_t task, int thread) {
      const int64_t head = task / g.k_blocks, kb = task % g.k_blocks;
      key_block_gradients(p, BackwardTiles(scratch.thread(thread), D, DV), head / g.kv_heads, head % g.kv_heads, kb,
                          nullptr, 0);
    });
    for_each_task(heads_total * g.q_blocks, threads, [&](int64_t task, int thread) {
      const int64_t head = task / g.q_blocks, qb = g.q_blocks - 1 - task % g.q_blocks;
      query_block_gradient(p, BackwardTiles(scratch.thread(thread), D, DV), head / g.heads, head % g.heads, qb);
    });
  }
  gemm.check("flash_attention_backward");
}

void flash_attention_kernel(const AttentionOutput& result, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionMask& mask, float scale) {
  dispatch_float("flash_attention", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    forward<T>(result, q, k, v, mask, scale);
  });
}

void flash_attention_backward_kernel(const AttentionGrads& grads, const Tensor& grad_out, const Tensor& q,
                                     const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                                     const AttentionMask& mask, float scale) {
  dispatch_float("flash_attention_backward", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    backward<T>(grads, grad_out, q, k, v, out, lse, mask, scale);
  });
}

}  // namespace

void register_attention() {
  flash_attention_kernels.set_kernel(DeviceType::cpu, flash_attention_kernel);
  flash_attention_backward_kernels.set_kernel(DeviceType::cpu, flash_attention_backward_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
