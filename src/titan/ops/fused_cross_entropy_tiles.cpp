#include "titan/ops/fused_cross_entropy_tiles.h"

#include <algorithm>

#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/ops/gemm.h"

namespace titan::ops {

int64_t fused_cross_entropy_vocab(const Tensor& weight, const FusedCrossEntropyOptions& options) {
  const int64_t vocab = options.vocab_size > 0 ? options.vocab_size : weight.size(0);
  TITAN_CHECK(options.vocab_offset >= 0 && options.vocab_offset + weight.size(0) <= vocab,
              "fused_linear_cross_entropy: weight rows [{}, {}) outside the vocabulary of {}", options.vocab_offset,
              options.vocab_offset + weight.size(0), vocab);
  return vocab;
}

FusedCrossEntropyTiles::FusedCrossEntropyTiles(FusedCrossEntropyOutput& result, const Tensor& hidden,
                                               const Tensor& weight, const FusedCrossEntropyOptions& options)
    : result_(result),
      hidden_(hidden),
      weight_(weight),
      options_(options.loss),
      grads_(options.compute_grads),
      bf16_(hidden.dtype() == DType::bf16),
      rows_(hidden.size(0)),
      vocab_(weight.size(0)),
      token_chunk_(std::min(options.token_chunk, rows_)),
      vocab_chunk_(options.vocab_chunk == 0 ? vocab_ : std::min(options.vocab_chunk, vocab_)),
      split_(vocab_chunk_ < vocab_),
      combine_(options.combine) {
  const Device device = hidden.device();
  logits_ = Tensor::empty({token_chunk_, vocab_chunk_}, DType::f32, device);
  if (grads_ && bf16_) grad_tile_ = Tensor::empty({token_chunk_, vocab_chunk_}, DType::bf16, device);
  if (grads_ && split_ && bf16_) grad_hidden_f32_ = Tensor::empty({token_chunk_, hidden.size(1)}, DType::f32, device);
}

void FusedCrossEntropyTiles::run() {
  for (int64_t t0 = 0; t0 < rows_; t0 += token_chunk_) {
    const int64_t tc = std::min(token_chunk_, rows_ - t0);
    for (int64_t v0 = 0; v0 < vocab_; v0 += vocab_chunk_) reduce_tile(t0, tc, v0);
    if (combine_) combine_(lse_rows(), target_logit_rows(), tc);
    finish_rows(t0, tc);
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
  finish_loss();
}

int64_t FusedCrossEntropyTiles::chunk_width(int64_t v0) const { return std::min(vocab_chunk_, vocab_ - v0); }

void FusedCrossEntropyTiles::compute_logits(int64_t t0, int64_t tc, int64_t v0) {
  const int64_t vc = chunk_width(v0);
  gemm(hidden_.narrow(0, t0, tc), weight_.narrow(0, v0, vc).transpose(0, 1), logits_.narrow(0, 0, tc).narrow(1, 0, vc));
}

void FusedCrossEntropyTiles::reduce_tile(int64_t t0, int64_t tc, int64_t v0) {
  compute_logits(t0, tc, v0);
  const Tile tile{t0, tc, v0, chunk_width(v0)};
  // With a combine step the gradient needs the whole vocabulary's lse: it waits for pass 2.
  const bool gradient = grads_ && !split_ && !combine_;
  reduce_rows(tile, /*first=*/v0 == 0, /*last=*/v0 + tile.vc == vocab_, gradient);
}

void FusedCrossEntropyTiles::gradient_tile(int64_t t0, int64_t tc, int64_t v0, bool recompute) {
  if (recompute) compute_logits(t0, tc, v0);
  const Tile tile{t0, tc, v0, chunk_width(v0)};
  gradient_rows(tile, /*capped=*/!recompute);
  accumulate_grads(t0, tc, v0, tile.vc);
}

void FusedCrossEntropyTiles::accumulate_grads(int64_t t0, int64_t tc, int64_t v0, int64_t vc) {
  const Tensor dlogits = gradient_buffer().narrow(0, 0, tc).narrow(1, 0, vc);
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

}  // namespace titan::ops
