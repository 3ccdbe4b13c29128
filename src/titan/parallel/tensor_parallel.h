// Tensor and sequence parallelism (Megatron-style) over the mesh's tp group.
// Between blocks the residual stream is split along the sequence
// ([B, S/tp, D]); attention and the feed-forward gather the sequence on the
// way in, compute with their heads / hidden units split (column-parallel
// projections in, row-parallel out), and reduce-scatter the partial outputs
// back along the sequence. The embedding table and the output projection are
// split by vocabulary rows, and the loss is computed without ever gathering
// the logits.
// Every redistribution is an autograd op whose backward is its transpose.
#pragma once

#include <memory>

#include "titan/comm/process_group.h"
#include "titan/nn/module.h"
#include "titan/ops/cross_entropy.h"

namespace titan::parallel {

// x [B, s, ...] on each rank -> [B, tp * s, ...] (rank r's part at [r s, (r+1) s)).
// Backward: reduce-scatter, summing every rank's gradient for each part.
Tensor gather_sequence(const Tensor& x, const std::shared_ptr<comm::ProcessGroup>& group);
// x [B, S, ...] partial sums on each rank -> rank r's [B, S / tp, ...] of their sum. Backward: gather.
Tensor reduce_scatter_sequence(const Tensor& x, const std::shared_ptr<comm::ProcessGroup>& group);
// Every rank's partial output summed, whole on every rank: the row-parallel
// end of a module under tensor parallelism without sequence parallelism.
// Inference only (generation): it has no backward, and refuses a tensor
// that needs one.
Tensor sum_partial_outputs(const Tensor& x, comm::ProcessGroup& group);

// Keeps this rank's 1/tp of the parameter along `dim` (equal parts; errors
// name the parameter when the size does not divide).
void shard_parameter(const std::string& name, nn::Parameter& parameter, int64_t dim, const comm::ProcessGroup& group);
// The mechanism under it (and under expert parallelism's split of the experts):
// keeps this rank's equal part along `dim` as the new leaf and records where it
// sits in the whole tensor (the size must divide; callers check and name it).
void keep_rank_part(nn::Parameter& parameter, int64_t dim, const comm::ProcessGroup& group);
// The full tensor from every rank's equal part along `dim` (a collective).
Tensor gather_parameter(const Tensor& local, int64_t dim, comm::ProcessGroup& group);

// The lookup of ids [B, S] (whole on every rank) in a table split by
// vocabulary rows over the group (this rank's `weight` [V / tp, D] holds rows
// [rank * V / tp, (rank + 1) * V / tp)), left split along the sequence: each
// rank looks up the ids that fall in its rows (zeros for the others), and the
// partial lookups are summed and scattered as rank r's [B, S / tp, D].
// Backward: the gradient gathered along the sequence, scattered into this
// rank's rows. TorchTitan's RowwiseParallel embedding with Shard(1) output.
Tensor vocab_parallel_embedding(const Tensor& weight, const Tensor& ids,
                                const std::shared_ptr<comm::ProcessGroup>& group);

// Cross-entropy of hidden [N, D] (the whole sequence, same on every rank)
// against a weight holding this rank's vocab_size / tp rows, fused and chunked
// like ops::fused_linear_cross_entropy; per-row log-sum-exp and target logits
// are all-reduced over the group. Every rank returns the same loss; the hidden
// gradient is this rank's part (summed by gather_sequence's backward).
Tensor vocab_parallel_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                    int64_t vocab_size, ops::FusedCrossEntropyOptions options,
                                    const std::shared_ptr<comm::ProcessGroup>& group);

}  // namespace titan::parallel
