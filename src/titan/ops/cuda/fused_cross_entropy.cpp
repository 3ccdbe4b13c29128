// CUDA fused linear cross-entropy: cross_entropy(hidden @ weight^T, targets)
// and both input gradients without ever holding the N x V logits. The
// algorithm, its formulas and its memory are the CPU kernel's (see the header
// comment of ops/cpu/kernels/cross_entropy.cpp): token chunks of tc rows are
// the outer loop and vocabulary chunks of vc columns the inner one; each tile
// of logits is one GEMM through ops::gemm (cuBLASLt) into an f32 buffer; one
// vocabulary chunk lets each row become its gradient as soon as its lse is
// known, a split vocabulary keeps an online (max, sum) per row in pass 1 and
// recomputes every tile in pass 2. Gradients accumulate through GEMMs with
// beta = 1 (beta = 0 on the first), in a fixed order.
//
// What differs on the GPU:
//  - Row kernels (fused_cross_entropy_kernels.cu) do the capping, online
//    log-sum-exp, target gather and gradient, one block per tile row.
//  - Targets are checked and counted on the device, and the scale of every
//    gradient (1 / count for a mean) is computed there too and read by the
//    kernels from device memory. Eagerly, the count and the first bad row
//    come back to the host with the one synchronisation of the call, before
//    any GEMM, so an out-of-range target is an error, not a wild read. While
//    a step is being recorded (CUDA graph) nothing comes back: the kernels
//    run on the device's own count, counted_tokens is -1, and a bad target
//    is not caught (it was checked by the eager warm-up steps' data path).
//  - `combine` (vocabulary parallelism) gets DEVICE pointers to the chunk's
//    per-row lse and target logits (tc floats each), valid on
//    current_stream(): it must order its work on that stream (e.g. enqueue
//    an all-reduce on it), since everything after it is queued there too.
//  - Row losses land in a device array of N floats, summed at the end by one
//    block in double, in an order fixed by the block shape.
//  - Extra memory: the CPU kernel's tiles, plus 12*N bytes (targets as
//    columns, row losses) and 16*tc of row state; cuBLASLt's workspace is the
//    GEMM's own, allocated once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>

#include "titan/core/copy.h"
#include "titan/ops/cross_entropy.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/fused_cross_entropy_kernels.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/gemm.h"

namespace titan::ops::cuda {
namespace {

// One call of the fused op (the CPU kernel's FusedLinearCrossEntropy, on the device).
class FusedLinearCrossEntropy {
 public:
  FusedLinearCrossEntropy(FusedCrossEntropyOutput& result, const Tensor& hidden, const Tensor& weight,
                          const Tensor& columns, const Tensor& summary, const Tensor& scale,
                          const FusedCrossEntropyOptions& options)
      : result_(result),
        hidden_(hidden),
        weight_(weight),
        columns_(columns.data<int64_t>()),
        counted_(summary.data<int64_t>()),
        scale_(scale.data<float>()),
        options_(options.loss),
        grads_(options.compute_grads),
        bf16_(hidden.dtype() == DType::bf16),
        rows_(hidden.size(0)),
        vocab_(weight.size(0)),
        token_chunk_(std::min(options.token_chunk, rows_)),
        vocab_chunk_(options.vocab_chunk == 0 ? vocab_ : std::min(options.vocab_chunk, vocab_)),
        split_(vocab_chunk_ < vocab_),
        combine_(options.combine),
        stream_(current_stream()) {
    const Device device = hidden.device();
    logits_ = Tensor::empty({token_chunk_, vocab_chunk_}, DType::f32, device);
    if (grads_ && bf16_) grad_tile_ = Tensor::empty({token_chunk_, vocab_chunk_}, DType::bf16, device);
    if (grads_ && split_ && bf16_) grad_hidden_f32_ = Tensor::empty({token_chunk_, hidden.size(1)}, DType::f32, device);
    row_state_ = Tensor::empty({4, token_chunk_}, DType::f32, device);
    row_loss_ = Tensor::empty({rows_}, DType::f32, device);
    float* state = row_state_.data<float>();
    rows_state_ = {state, state + token_chunk_, state + 2 * token_chunk_, state + 3 * token_chunk_};
  }

  void run() {
    for (int64_t t0 = 0; t0 < rows_; t0 += token_chunk_) {
      const int64_t tc = std::min(token_chunk_, rows_ - t0);
      for (int64_t v0 = 0; v0 < vocab_; v0 += vocab_chunk_) reduce_tile(t0, tc, v0);
      if (combine_) {
        combine_(rows_state_.lse, rows_state_.target_logit, tc);
        TITAN_CUDA_CHECK(launch_fused_ce_row_losses(row_loss_.data<float>() + t0, columns_ + t0, rows_state_, tc,
                                                    options_.z_loss, stream_));
      }
      if (!grads_) continue;
      if (split_) {
        for (int64_t v0 = 0; v0 < vocab_; v0 += vocab_chunk_) gradient_tile(t0, tc, v0, /*recompute=*/true);
      } else if (combine_) {
        gradient_tile(t0, tc, 0, /*recompute=*/false);  // the tile still holds this chunk's capped logits
      } else {
        accumulate_grads(t0, tc, 0, vocab_);  // reduce_tile has formed the gradient tile
      }
      if (grad_hidden_f32_.defined()) {
        copy_(result_.grad_hidden.narrow(0, t0, tc), grad_hidden_f32_.narrow(0, 0, tc));  // rounded once
      }
    }
    TITAN_CUDA_CHECK(launch_fused_ce_total_loss(result_.loss.data<float>(), row_loss_.data<float>(), rows_, counted_,
                                                options_.mean, stream_));
  }

 private:
  int64_t chunk_width(int64_t v0) const { return std::min(vocab_chunk_, vocab_ - v0); }

  // logits[0:tc, 0:vc] = hidden[t0:t0+tc] @ weight[v0:v0+vc]^T, a view of the tile buffer.
  Tensor compute_logits(int64_t t0, int64_t tc, int64_t v0) {
    const int64_t vc = chunk_width(v0);
    Tensor tile = logits_.narrow(0, 0, tc).narrow(1, 0, vc);
    gemm(hidden_.narrow(0, t0, tc), weight_.narrow(0, v0, vc).transpose(0, 1), tile);
    return tile;
  }

  FusedCeTile tile_args(int64_t t0, int64_t tc, int64_t v0) const {
    FusedCeTile tile;
    tile.logits = logits_.data<float>();
    tile.stride = vocab_chunk_;
    tile.rows = tc;
    tile.cols = chunk_width(v0);
    tile.col_offset = v0;
    tile.columns = columns_ + t0;
    tile.softcap = options_.softcap;
    tile.z_loss = options_.z_loss;
    tile.scale = scale_;
    if (grads_) {
      tile.grad = bf16_ ? grad_tile_.data_ptr() : logits_.data_ptr();
      tile.grad_bf16 = bf16_;
    }
    return tile;
  }

  // Pass 1: folds one vocabulary chunk into each row's running lse and target
  // logit. With one chunk and no combine step, also forms the gradient tile.
  void reduce_tile(int64_t t0, int64_t tc, int64_t v0) {
    compute_logits(t0, tc, v0);
    FusedCeTile tile = tile_args(t0, tc, v0);
    // With a combine step the gradient needs the whole vocabulary's lse: it waits for pass 2.
    const bool fuse_gradient = grads_ && !split_ && !combine_;
    if (!fuse_gradient) tile.grad = nullptr;
    const bool last = v0 + tile.cols == vocab_;
    float* row_loss = combine_ ? nullptr : row_loss_.data<float>() + t0;
    TITAN_CUDA_CHECK(launch_fused_ce_reduce_tile(tile, rows_state_, v0 == 0, last, row_loss, stream_));
  }

  // Pass 2: forms one tile's gradient (recomputing its logits when the
  // vocabulary is split) and accumulates both input gradients.
  void gradient_tile(int64_t t0, int64_t tc, int64_t v0, bool recompute) {
    if (recompute) compute_logits(t0, tc, v0);
    const FusedCeTile tile = tile_args(t0, tc, v0);
    TITAN_CUDA_CHECK(launch_fused_ce_gradient_tile(tile, rows_state_, /*capped=*/!recompute, stream_));
    accumulate_grads(t0, tc, v0, tile.cols);
  }

  // grad_hidden[t0:t0+tc] += dlogits @ weight[v0:v0+vc]; grad_weight[v0:v0+vc] += dlogits^T @ hidden[t0:t0+tc].
  void accumulate_grads(int64_t t0, int64_t tc, int64_t v0, int64_t vc) {
    const Tensor dlogits = (bf16_ ? grad_tile_ : logits_).narrow(0, 0, tc).narrow(1, 0, vc);
    const Tensor weight = weight_.narrow(0, v0, vc);
    const float hidden_beta = v0 == 0 ? 0.0f : 1.0f;
    if (grad_hidden_f32_.defined()) {
      gemm(dlogits, weight, grad_hidden_f32_.narrow(0, 0, tc), 1.0f, hidden_beta);
    } else {
      // f32, or bf16 in one vocabulary chunk: the GEMM's f32 accumulator is rounded once into grad_hidden.
      gemm(dlogits, weight, result_.grad_hidden.narrow(0, t0, tc), 1.0f, hidden_beta);
    }
    gemm(dlogits.transpose(0, 1), hidden_.narrow(0, t0, tc), result_.grad_weight.narrow(0, v0, vc), 1.0f,
         t0 == 0 ? 0.0f : 1.0f);
  }

  FusedCrossEntropyOutput& result_;
  const Tensor& hidden_;
  const Tensor& weight_;
  const int64_t* columns_;  // device: each row's target column (launch_fused_ce_targets)
  const int64_t* counted_;  // device: rows counted
  const float* scale_;      // device: d(loss)/d(row loss) for a unit loss gradient
  const CrossEntropyOptions& options_;
  const bool grads_, bf16_;
  const int64_t rows_, vocab_, token_chunk_, vocab_chunk_;
  const bool split_;
  const std::function<void(float*, float*, int64_t)> combine_;
  const cudaStream_t stream_;
  Tensor logits_;           // [tc, vc] f32 tile; for f32 also its gradient, in place
  Tensor grad_tile_;        // [tc, vc] bf16 gradient tile (bf16 only)
  Tensor grad_hidden_f32_;  // [tc, D] f32 accumulator (bf16 with a split vocabulary only)
  Tensor row_state_;        // [4, tc] f32: running max, running sum, target logit, lse
  Tensor row_loss_;         // [N] f32: each row's loss (0 when ignored)
  FusedCeRows rows_state_;
};

// Each row's target column (i64), the summary [counted, first bad row] (i64)
// and the gradient scale (f32), all on the device.
struct TargetInfo {
  Tensor columns, summary, scale;
  int64_t counted = -1;  // on the host; -1 while recording a step (not read back)
};

bool recording(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TITAN_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status == cudaStreamCaptureStatusActive;
}

// Checks and counts the targets on the device; eagerly, one synchronisation
// brings the count home and turns a bad target into an error.
TargetInfo read_targets(const Tensor& targets, int64_t vocab, const FusedCrossEntropyOptions& options, int64_t local) {
  const char* op = "fused_linear_cross_entropy";
  const int64_t rows = targets.size(0);
  const cudaStream_t stream = current_stream();
  TargetInfo info{Tensor::empty({rows}, DType::i64, targets.device()), Tensor::empty({2}, DType::i64, targets.device()),
                  Tensor::empty({1}, DType::f32, targets.device())};
  TITAN_CUDA_CHECK(launch_fused_ce_targets(info.columns.data<int64_t>(), info.summary.data<int64_t>(),
                                           info.scale.data<float>(), options.loss.mean, targets.data_ptr(),
                                           targets.dtype() == DType::i64, rows, vocab, options.loss.ignore_index,
                                           options.vocab_offset, local, stream));
  if (recording(stream)) return info;
  int64_t host[2] = {0, 0};
  TITAN_CUDA_CHECK(cudaMemcpyAsync(host, info.summary.data_ptr(), sizeof(host), cudaMemcpyDeviceToHost, stream));
  TITAN_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int64_t bad_row = host[1];
  if (bad_row < rows) {
    // The error path may synchronise again: fetch the offending value for the message.
    int64_t wide = 0;
    int32_t narrow = 0;
    const bool i64 = targets.dtype() == DType::i64;
    TITAN_CUDA_CHECK(cudaMemcpyAsync(i64 ? static_cast<void*>(&wide) : static_cast<void*>(&narrow),
                                     static_cast<const char*>(targets.data_ptr()) + bad_row * targets.element_size(),
                                     targets.element_size(), cudaMemcpyDeviceToHost, stream));
    TITAN_CUDA_CHECK(cudaStreamSynchronize(stream));
    const int64_t value = i64 ? wide : narrow;
    fail("{}: target {} at row {} is outside the vocabulary [0, {}) and is not ignore_index ({})", op, value, bad_row,
         vocab, options.loss.ignore_index);
  }
  info.counted = host[0];
  return info;
}

void fused_cross_entropy_kernel(FusedCrossEntropyOutput& result, const Tensor& hidden, const Tensor& weight,
                                const Tensor& targets, const FusedCrossEntropyOptions& options) {
  const int64_t vocab = options.vocab_size > 0 ? options.vocab_size : weight.size(0);
  TITAN_CHECK(options.vocab_offset >= 0 && options.vocab_offset + weight.size(0) <= vocab,
              "fused_linear_cross_entropy: weight rows [{}, {}) outside the vocabulary of {}", options.vocab_offset,
              options.vocab_offset + weight.size(0), vocab);
  const TargetInfo info = read_targets(targets, vocab, options, weight.size(0));
  result.counted_tokens = info.counted;
  const cudaStream_t stream = current_stream();
  if (info.counted == 0) {
    // Nothing counted: the loss is defined as 0 and every gradient as 0 (not
    // 0/0); all-zero bits are 0.0 in f32 and bf16 alike. (A recorded step
    // takes the full path, whose scale of 0 gives the same zeros.)
    auto zero = [stream](const Tensor& t) {
      if (t.nbytes() > 0) TITAN_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), stream));
    };
    zero(result.loss);
    if (options.compute_grads) {
      zero(result.grad_hidden);
      zero(result.grad_weight);
    }
    return;
  }
  // Counted rows with an empty shard: every target lies elsewhere, and there
  // is no logit here to take an lse over.
  TITAN_CHECK(weight.size(0) > 0, "fused_linear_cross_entropy: the weight holds no vocabulary rows");
  if (hidden.dtype() != DType::f32 && hidden.dtype() != DType::bf16) {
    unsupported_dtype("fused_linear_cross_entropy", hidden.device(), hidden.dtype());
  }
  FusedLinearCrossEntropy(result, hidden, weight, info.columns, info.summary, info.scale, options).run();
}

}  // namespace

void register_fused_cross_entropy() {
  fused_cross_entropy_kernels.set_kernel(DeviceType::cuda, fused_cross_entropy_kernel);
}

}  // namespace titan::ops::cuda
