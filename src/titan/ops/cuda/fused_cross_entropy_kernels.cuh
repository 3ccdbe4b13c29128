// Row kernels of the CUDA fused linear cross-entropy (fused_cross_entropy.cpp
// runs the GEMMs and the chunk loop). Plain pointers and sizes only, so nvcc
// never sees Tensor or fmt. Every kernel gives each row of a tile to one
// block and reduces in an order fixed by the block shape: no atomics, the same
// bits on every run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace titan::ops::cuda {

// A row's target as a column of this weight's rows, or one of these.
inline constexpr int64_t kFusedCeIgnored = -1;    // the target is ignore_index
inline constexpr int64_t kFusedCeElsewhere = -2;  // counted, but in another vocabulary shard

// Reads targets (i32 or i64) into columns[rows] and writes summary[0] = the
// counted rows, summary[1] = the first row whose target is neither
// ignore_index nor in [0, vocab) (rows when there is none), and scale[0] =
// d(loss)/d(row loss) (1 / counted for a mean, 0 when nothing counts). This
// weight holds the vocabulary rows [offset, offset + local). Everything stays
// on the device: a recorded step reads none of it on the host.
cudaError_t launch_fused_ce_targets(int64_t* columns, int64_t* summary, float* scale, bool mean, const void* targets,
                                    bool targets_i64, int64_t rows, int64_t vocab, int64_t ignore_index, int64_t offset,
                                    int64_t local, cudaStream_t stream);

// Per row of the current token chunk (f32 device arrays).
struct FusedCeRows {
  float* running_max = nullptr;
  float* running_sum = nullptr;  // of exp(z - running_max)
  float* target_logit = nullptr;
  float* lse = nullptr;
};

// One tile: rows x cols f32 logits, `stride` apart, for vocabulary columns
// [col_offset, col_offset + cols) of this weight.
struct FusedCeTile {
  float* logits = nullptr;
  int64_t stride = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t col_offset = 0;
  const int64_t* columns = nullptr;  // the tile's rows' targets (launch_fused_ce_targets), already offset
  float softcap = 0.0f;
  float z_loss = 0.0f;
  const float* scale = nullptr;  // device: d(loss)/d(row loss)
  // The gradient tile (same stride): f32 (may be `logits` itself) or bf16; null for none.
  void* grad = nullptr;
  bool grad_bf16 = false;
};

// Caps the tile's logits in place and folds them into each row's running
// max, sum and target logit (first: start from nothing). last: also finishes
// lse; then with row_loss non-null writes each row's loss there (0 for an
// ignored row), and with tile.grad non-null turns the row into its gradient.
cudaError_t launch_fused_ce_reduce_tile(const FusedCeTile& tile, const FusedCeRows& state, bool first, bool last,
                                        float* row_loss, cudaStream_t stream);

// Writes the gradient of a tile from the finished lse; capped says the tile
// already holds capped logits (else they are capped on the way).
cudaError_t launch_fused_ce_gradient_tile(const FusedCeTile& tile, const FusedCeRows& state, bool capped,
                                          cudaStream_t stream);

// row_loss[r] = lse - target_logit + z_loss * lse^2 for counted rows, 0 for ignored ones.
cudaError_t launch_fused_ce_row_losses(float* row_loss, const int64_t* columns, const FusedCeRows& state, int64_t rows,
                                       float z_loss, cudaStream_t stream);

// loss[0] = the sum of row_loss[0, rows) (in double, fixed order), divided by
// *counted (device) when mean; 0 when nothing counts.
cudaError_t launch_fused_ce_total_loss(float* loss, const float* row_loss, int64_t rows, const int64_t* counted,
                                       bool mean, cudaStream_t stream);

}  // namespace titan::ops::cuda
