// CPU cross-entropy: the plain op over materialised logits (forward and
// backward) and the fused linear cross-entropy, which computes
// cross_entropy(hidden @ weight^T, targets) and both input gradients without
// ever holding the N x V logits.
//
// Per row, in f32: z = cap * tanh(x / cap) when softcap > 0 (else z = x),
// lse = max + log(sum exp(z - max)), loss = lse - z[target] + z_loss * lse^2,
//   d(loss)/dx_j = (softmax_j * (1 + 2 z_loss lse) - [j == target]) * scale * (1 - (z_j / cap)^2)
// with scale = grad_loss / counted (mean) or grad_loss (sum). Row losses are
// summed in double in row order, so the loss does not depend on the thread
// count. Targets are validated before any parallel region (errors must not be
// thrown inside one); ignored rows get exactly zero gradient, never 0 * NaN.
//
// Fused path: tc = token_chunk rows at a time, vc = vocab_chunk columns (0 =
// all of V). The tile loop, its GEMMs and its buffers are shared with the
// CUDA kernel (ops/fused_cross_entropy_tiles.h); the rows' work is here. Each
// tile of logits is one oneDNN GEMM, hidden[t0:t0+tc] @ weight[v0:v0+vc]^T,
// into an f32 buffer (bf16 operands accumulate in f32, so the loss sees f32
// logits in both dtypes).
//  - Memory beyond inputs and outputs, all through the tensor allocator:
//      f32:  4*tc*vc bytes, the logits tile, which becomes its own gradient in place;
//      bf16: 6*tc*vc (+ 4*tc*D when V is split): the tile, its gradient rounded
//            to bf16 (GEMM operands share a dtype; the plain bf16 path rounds
//            d(logits) the same way) and an f32 grad_hidden accumulator for the
//            row chunk, rounded once at the end.
//    Besides: 16*tc bytes of per-row state and 8*N of validated targets
//    (std::vector), and oneDNN's own GEMM scratchpad. At tc=1024, vc=8192, f32:
//    32 MiB, where whole logits at N=4096, V=32768 are 512 MiB (and the plain
//    path's gradient of them as much again).
//  - Whole vocabulary in one chunk (vc >= V): a row's lse is known as soon as
//    its tile row is, so each row is capped, reduced and turned into its
//    gradient in one sweep while it is still in cache, then two GEMMs carry the
//    gradient tile into grad_hidden and grad_weight: 6*N*V*D flops, as linear +
//    cross_entropy, in 4*tc*V bytes of scratch rather than 8*N*V.
//  - Split vocabulary: softmax_j needs the lse over every chunk, so no chunk's
//    gradient can be formed before all have been seen. Pass 1 computes each
//    tile and keeps only a running max and sum-exp per row (the sum rescaled
//    when the max grows: the online logsumexp) and the target's logit; pass 2
//    recomputes each tile and forms its gradient. The recompute costs one more
//    logits GEMM, 8*N*V*D flops instead of 6 (+33%), and a second sweep of exp
//    over the tile; keeping the tiles instead would cost 4*tc*V bytes again.
//  - Accumulation: grad_hidden[rows] += dlogits @ weight[v0:v0+vc] over vocab
//    chunks in order; grad_weight[v0:v0+vc] += dlogits^T @ hidden[rows] over
//    token chunks in order (GEMM beta = 1, and beta = 0 on the first, so nothing
//    needs zero-filling). Every sum has an order fixed by the chunking, none by
//    thread timing: no atomics, the same bits on every run.
//  - Token chunks are the outer loop, so per-row state and the grad_hidden
//    accumulator cover one chunk only; the price is streaming weight (and
//    read-modify-writing grad_weight) once per token chunk, which the GEMMs
//    amortise over tc multiply-adds per element.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "titan/core/copy.h"
#include "titan/ops/cross_entropy.h"
#include "titan/ops/fused_cross_entropy_tiles.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Each row's target column in this weight's rows, kIgnored for a row whose
// target is ignore_index, or kElsewhere for a target in another vocabulary
// shard (vocabulary parallelism: counted, but its logit lives elsewhere).
constexpr int64_t kIgnored = -1;
constexpr int64_t kElsewhere = -2;

struct Targets {
  std::vector<int64_t> columns;
  int64_t counted = 0;
};

// `vocab` is the whole vocabulary; this weight holds [offset, offset + local).
Targets read_targets(const char* op, const Tensor& targets, int64_t vocab, int64_t ignore_index, int64_t offset = 0,
                     int64_t local = -1) {
  if (local < 0) local = vocab;
  Targets result;
  const int64_t rows = targets.numel();
  result.columns.resize(static_cast<size_t>(rows));
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t value = targets.dtype() == DType::i64 ? targets.data<int64_t>()[row] : targets.data<int32_t>()[row];
    int64_t& column = result.columns[static_cast<size_t>(row)];
    if (value == ignore_index) {
      column = kIgnored;
      continue;
    }
    TITAN_CHECK(value >= 0 && value < vocab,
                "{}: target {} at row {} is outside the vocabulary [0, {}) and is not ignore_index ({})", op, value,
                row, vocab, ignore_index);
    column = value >= offset && value < offset + local ? value - offset : kElsewhere;
    ++result.counted;
  }
  return result;
}

// d(loss)/d(row loss): the upstream gradient, divided by the count for a mean.
float row_scale(float grad_loss, int64_t counted, bool mean) {
  if (counted == 0) return 0.0f;
  return mean ? grad_loss / static_cast<float>(counted) : grad_loss;
}

// The counted rows' summed losses (double, row order), reduced as the options say.
float reduce_loss(double total, int64_t counted, bool mean) {
  if (counted == 0) return 0.0f;
  return static_cast<float>(mean ? total / static_cast<double>(counted) : total);
}

// cap * tanh(x / cap) through fast_exp, so the loop vectorises: tanh(y) =
// sign(y) (1 - e) / (1 + e) with e = exp(-2|y|) <= 1 never overflows. The
// absolute error is about cap * 1e-7, far below what the loss can resolve.
inline float soft_cap(float x, float cap) {
  const float y = x / cap;
  const float e = fast_exp(-2.0f * std::fabs(y));
  return std::copysign(cap * (1.0f - e) / (1.0f + e), y);
}

// z[j] = the capped f32 value of x[j]; z may be x itself (f32 tiles are capped in place).
template <typename T>
void load_capped(const T* x, float* z, int64_t n, float cap) {
  if (cap > 0.0f) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) z[j] = soft_cap(to_f32(x[j]), cap);
  } else if (static_cast<const void*>(x) != static_cast<const void*>(z)) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) z[j] = to_f32(x[j]);
  }
}

// Folds z[0, n) into a row's running (max, sum of exp(z - max)), rescaling the
// old sum when the max grows: the online logsumexp that lets V be split.
// Starting from (-inf, 0), exp(-inf - max) = 0 drops the empty history.
inline void accumulate_lse(const float* z, int64_t n, float& running_max, float& running_sum) {
  float chunk_max = kNegInf;
#pragma omp simd reduction(max : chunk_max)
  for (int64_t j = 0; j < n; ++j) chunk_max = std::max(chunk_max, z[j]);
  const float new_max = std::max(running_max, chunk_max);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) sum += fast_exp(z[j] - new_max);
  running_sum = running_sum * std::exp(running_max - new_max) + sum;
  running_max = new_max;
}

inline float token_loss(float lse, float target_logit, float z_loss) { return lse - target_logit + z_loss * lse * lse; }

// out[j] = d(loss)/dx_j for one row from its capped values z (out may alias z
// element for element). `target` is the target's column in this row segment,
// or -1 when it lies in another vocabulary chunk.
template <typename Out>
void gradient_row(const float* z, Out* out, int64_t n, int64_t target, float lse, float scale, float z_loss,
                  float cap) {
  const float prob_scale = (1.0f + 2.0f * z_loss * lse) * scale;
  if (cap > 0.0f) {
    const float inverse_cap = 1.0f / cap;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float capped = z[j] * inverse_cap;
      const float g = fast_exp(z[j] - lse) * prob_scale - (j == target ? scale : 0.0f);
      out[j] = from_f32<Out>(g * (1.0f - capped * capped));
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      out[j] = from_f32<Out>(fast_exp(z[j] - lse) * prob_scale - (j == target ? scale : 0.0f));
    }
  }
}

template <typename Out>
void zero_row(Out* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = from_f32<Out>(0.0f);
}

// Rows per parallel chunk: enough that a chunk holds ~4096 elements.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)); }

void cross_entropy_kernel(CrossEntropyOutput& result, const Tensor& logits, const Tensor& targets,
                          const CrossEntropyOptions& options) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const Targets target = read_targets("cross_entropy", targets, vocab, options.ignore_index);
  std::vector<float> row_loss(static_cast<size_t>(rows), 0.0f);
  float* lse = result.lse.data<float>();
  dispatch_float("cross_entropy", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    parallel_for(rows, row_grain(vocab), [&](int64_t begin, int64_t end) {
      std::vector<float> z(static_cast<size_t>(vocab));
      for (int64_t row = begin; row < end; ++row) {
        load_capped(x + row * vocab, z.data(), vocab, options.softcap);
        float row_max = kNegInf, row_sum = 0.0f;
        accumulate_lse(z.data(), vocab, row_max, row_sum);
        lse[row] = row_max + std::log(row_sum);
        const int64_t column = target.columns[static_cast<size_t>(row)];
        if (column >= 0) row_loss[static_cast<size_t>(row)] = token_loss(lse[row], z[column], options.z_loss);
      }
    });
  });
  double total = 0.0;
  for (int64_t row = 0; row < rows; ++row) total += row_loss[static_cast<size_t>(row)];
  result.loss.data<float>()[0] = reduce_loss(total, target.counted, options.mean);
  result.counted_tokens = target.counted;
}

void cross_entropy_backward_kernel(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                   const Tensor& targets, const Tensor& lse, int64_t counted_tokens,
                                   const CrossEntropyOptions& options) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const Targets target = read_targets("cross_entropy_backward", targets, vocab, options.ignore_index);
  const float scale = row_scale(grad_loss.data<float>()[0], counted_tokens, options.mean);
  const float* row_lse = lse.data<float>();
  dispatch_float("cross_entropy_backward", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* grad = grad_logits.data<T>();
    parallel_for(rows, row_grain(vocab), [&](int64_t begin, int64_t end) {
      std::vector<float> z(static_cast<size_t>(vocab));
      for (int64_t row = begin; row < end; ++row) {
        const int64_t column = target.columns[static_cast<size_t>(row)];
        if (column < 0) {
          zero_row(grad + row * vocab, vocab);
          continue;
        }
        load_capped(x + row * vocab, z.data(), vocab, options.softcap);
        gradient_row(z.data(), grad + row * vocab, vocab, column, row_lse[row], scale, options.z_loss, options.softcap);
      }
    });
  });
}

// The CPU's row work on the tiles of the fused op (the loop, GEMMs and
// buffers are FusedCrossEntropyTiles'), for hidden and weight of dtype T.
template <typename T>
class CpuFusedCrossEntropy final : public FusedCrossEntropyTiles {
 public:
  CpuFusedCrossEntropy(FusedCrossEntropyOutput& result, const Tensor& hidden, const Tensor& weight,
                       const Targets& targets, const FusedCrossEntropyOptions& options)
      : FusedCrossEntropyTiles(result, hidden, weight, options),
        targets_(targets),
        scale_(row_scale(1.0f, targets.counted, options.loss.mean)) {
    const auto per_row = static_cast<size_t>(token_chunk_);
    running_max_.resize(per_row);
    running_sum_.resize(per_row);
    target_logit_.resize(per_row);
    lse_.resize(per_row);
  }

 private:
  int64_t column(int64_t row) const { return targets_.columns[static_cast<size_t>(row)]; }

  // The gradient tile; none for bf16 when no gradients are asked for.
  T* grad_rows() const {
    if constexpr (std::is_same_v<T, float>) {
      return logits_.data<float>();
    } else {
      return grads_ ? grad_tile_.data<T>() : nullptr;
    }
  }

  // Folds one vocabulary chunk into each row's running lse and picks up the
  // target logit; after the last chunk, finishes lse. With `gradient`, also
  // turns each row into its gradient while it is in cache.
  void reduce_rows(const Tile& tile, bool first, bool last, bool gradient) override {
    const int64_t t0 = tile.t0, v0 = tile.v0, vc = tile.vc;
    if (first) {
      std::fill_n(running_max_.begin(), tile.tc, kNegInf);
      std::fill_n(running_sum_.begin(), tile.tc, 0.0f);
      std::fill_n(target_logit_.begin(), tile.tc, 0.0f);
    }
    float* logits = logits_.data<float>();
    const int64_t stride = vocab_chunk_;
    T* grad = grad_rows();
    parallel_for(tile.tc, row_grain(vc), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* z = logits + r * stride;
        load_capped(z, z, vc, options_.softcap);
        accumulate_lse(z, vc, running_max_[r], running_sum_[r]);
        const int64_t target = column(t0 + r) - v0;
        if (target >= 0 && target < vc) target_logit_[r] = z[target];
        if (!last) continue;
        lse_[r] = running_max_[r] + std::log(running_sum_[r]);
        if (!gradient) continue;
        if (column(t0 + r) == kIgnored) {
          zero_row(grad + r * stride, vc);
        } else {
          gradient_row(z, grad + r * stride, vc, target, lse_[r], scale_, options_.z_loss, options_.softcap);
        }
      }
    });
  }

  float* lse_rows() override { return lse_.data(); }
  float* target_logit_rows() override { return target_logit_.data(); }

  void finish_rows(int64_t t0, int64_t tc) override {
    for (int64_t r = 0; r < tc; ++r) {
      if (column(t0 + r) != kIgnored) total_ += token_loss(lse_[r], target_logit_[r], options_.z_loss);
    }
  }

  void gradient_rows(const Tile& tile, bool capped) override {
    const int64_t t0 = tile.t0, v0 = tile.v0, vc = tile.vc;
    float* logits = logits_.data<float>();
    const int64_t stride = vocab_chunk_;
    T* grad = grad_rows();
    parallel_for(tile.tc, row_grain(vc), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        if (column(t0 + r) == kIgnored) {
          zero_row(grad + r * stride, vc);
          continue;
        }
        float* z = logits + r * stride;
        if (!capped) load_capped(z, z, vc, options_.softcap);
        gradient_row(z, grad + r * stride, vc, column(t0 + r) - v0, lse_[r], scale_, options_.z_loss, options_.softcap);
      }
    });
  }

  void finish_loss() override { result_.loss.data<float>()[0] = reduce_loss(total_, targets_.counted, options_.mean); }

  const Targets& targets_;
  const float scale_;   // d(loss)/d(row loss) for a unit loss gradient
  double total_ = 0.0;  // the counted rows' losses, in row order
  // Per row of the current token chunk.
  std::vector<float> running_max_, running_sum_, target_logit_, lse_;
};

void fused_cross_entropy_kernel(FusedCrossEntropyOutput& result, const Tensor& hidden, const Tensor& weight,
                                const Tensor& targets, const FusedCrossEntropyOptions& options) {
  const int64_t vocab = fused_cross_entropy_vocab(weight, options);
  const Targets target = read_targets("fused_linear_cross_entropy", targets, vocab, options.loss.ignore_index,
                                      options.vocab_offset, weight.size(0));
  result.counted_tokens = target.counted;
  if (target.counted == 0) {
    // Nothing counted: the loss is defined as 0 and every gradient as 0 (not 0/0).
    result.loss.data<float>()[0] = 0.0f;
    if (options.compute_grads) {
      fill_(result.grad_hidden, 0.0);
      fill_(result.grad_weight, 0.0);
    }
    return;
  }
  dispatch_float("fused_linear_cross_entropy", hidden.dtype(),
                 [&](auto tag) { CpuFusedCrossEntropy<decltype(tag)>(result, hidden, weight, target, options).run(); });
}

}  // namespace

void register_cross_entropy() {
  cross_entropy_kernels.set_kernel(DeviceType::cpu, cross_entropy_kernel);
  cross_entropy_backward_kernels.set_kernel(DeviceType::cpu, cross_entropy_backward_kernel);
  fused_cross_entropy_kernels.set_kernel(DeviceType::cpu, fused_cross_entropy_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
