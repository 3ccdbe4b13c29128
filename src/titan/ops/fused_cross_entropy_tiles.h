// The tile loop of the fused linear cross-entropy, shared by its CPU and CUDA
// kernels: which (token chunk, vocabulary chunk) tiles are formed in what
// order, the GEMMs that form their logits and carry their gradients into
// grad_hidden and grad_weight, and the buffers those use. What happens to the
// rows of a tile (capping, online log-sum-exp, losses, gradients) is the
// device's own, behind the virtual functions below.
#pragma once

#include <cstdint>
#include <functional>

#include "titan/core/tensor.h"
#include "titan/ops/cross_entropy.h"

namespace titan::ops {

// The whole vocabulary of a fused call (options.vocab_size, or the weight's
// rows when that is 0), after checking that the weight's rows [vocab_offset,
// vocab_offset + rows) lie inside it.
int64_t fused_cross_entropy_vocab(const Tensor& weight, const FusedCrossEntropyOptions& options);

// One call of the fused op; the algorithm and its memory are described in
// ops/cpu/kernels/cross_entropy.cpp's header comment. Token chunks of tc rows
// are the outer loop, vocabulary chunks of vc columns the inner one. Each tile
// of logits is one ops::gemm into an f32 buffer. One vocabulary chunk lets a
// row become its gradient as soon as its lse is known; a split vocabulary (or
// a combine step, which must see every row's lse first) leaves the gradient to
// a second pass, which recomputes the tiles when the vocabulary is split.
// Gradients accumulate through GEMMs with beta = 1 (beta = 0 on the first), in
// an order the chunking fixes.
class FusedCrossEntropyTiles {
 public:
  // Allocates the tile buffers (the f32 logits; with gradients and bf16
  // operands, the bf16 gradient tile and, for a split vocabulary, an f32
  // grad_hidden accumulator for the row chunk).
  FusedCrossEntropyTiles(FusedCrossEntropyOutput& result, const Tensor& hidden, const Tensor& weight,
                         const FusedCrossEntropyOptions& options);
  virtual ~FusedCrossEntropyTiles() = default;
  FusedCrossEntropyTiles(const FusedCrossEntropyTiles&) = delete;
  FusedCrossEntropyTiles& operator=(const FusedCrossEntropyTiles&) = delete;

  // Every tile in order; the loss and the gradients land in `result`.
  void run();

 protected:
  // Rows [t0, t0 + tc) of hidden against vocabulary columns [v0, v0 + vc) of
  // weight. Its logits are logits_[0:tc, 0:vc], rows vocab_chunk_ apart.
  struct Tile {
    int64_t t0, tc, v0, vc;
  };

  // Pass 1 on a tile whose logits have just been computed: caps them in place
  // and folds them into each row's running max, sum of exp and target logit,
  // starting from nothing on the token chunk's `first` tile. On its `last`
  // tile it finishes each row's lse and, with `gradient`, turns the row into
  // its gradient in the gradient tile (gradient_buffer()).
  virtual void reduce_rows(const Tile& tile, bool first, bool last, bool gradient) = 0;
  // The token chunk's per-row lse and target logit (tc floats each, in the
  // tensors' memory), handed to options.combine.
  virtual float* lse_rows() = 0;
  virtual float* target_logit_rows() = 0;
  // Once the chunk's lse and target logits are final (combined): its rows' losses.
  virtual void finish_rows(int64_t t0, int64_t tc) = 0;
  // Pass 2: a tile's gradient from the finished lse. `capped`: logits_ still
  // holds this tile's capped logits; else freshly recomputed ones, to be capped.
  virtual void gradient_rows(const Tile& tile, bool capped) = 0;
  // After the last chunk: the loss into result_.loss.
  virtual void finish_loss() = 0;

  // The gradient tile (the logits' row stride): the logits buffer itself for
  // f32 operands (each element becomes its own gradient), the bf16 tile else.
  const Tensor& gradient_buffer() const { return bf16_ ? grad_tile_ : logits_; }

  FusedCrossEntropyOutput& result_;
  const Tensor& hidden_;
  const Tensor& weight_;
  const CrossEntropyOptions& options_;
  const bool grads_, bf16_;
  const int64_t rows_, vocab_, token_chunk_, vocab_chunk_;
  const bool split_;
  const std::function<void(float*, float*, int64_t)> combine_;
  Tensor logits_;           // [tc, vc] f32 tile; for f32 operands also its gradient, in place
  Tensor grad_tile_;        // [tc, vc] bf16 gradient tile (bf16 with gradients only)
  Tensor grad_hidden_f32_;  // [tc, D] f32 accumulator (bf16 with gradients and a split vocabulary only)

 private:
  int64_t chunk_width(int64_t v0) const;
  // logits_[0:tc, 0:vc] = hidden[t0:t0+tc] @ weight[v0:v0+vc]^T.
  void compute_logits(int64_t t0, int64_t tc, int64_t v0);
  void reduce_tile(int64_t t0, int64_t tc, int64_t v0);
  void gradient_tile(int64_t t0, int64_t tc, int64_t v0, bool recompute);
  // grad_hidden[t0:t0+tc] += dlogits @ weight[v0:v0+vc]; grad_weight[v0:v0+vc] += dlogits^T @ hidden[t0:t0+tc].
  void accumulate_grads(int64_t t0, int64_t tc, int64_t v0, int64_t vc);
};

}  // namespace titan::ops
