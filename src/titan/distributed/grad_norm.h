// Gradient clipping when gradients are spread over ranks: each rank sums the
// squares of what it holds, the sums are all-reduced over the groups that
// split the parameters (dp_shard for FSDP shards), and every rank scales by
// the same factor.
#pragma once

#include <span>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/distributed/process_group.h"

namespace titan::distributed {

// sqrt(sum over `groups` of the local sums of squares of `grads`).
double global_grad_norm(std::span<const Tensor> grads, const std::vector<ProcessGroup*>& groups);
// Scales `grads` by max_norm / (norm + 1e-6) when that is below 1 (as
// torch.nn.utils.clip_grad_norm_); returns the norm before clipping.
double clip_grad_norm_(std::span<const Tensor> grads, double max_norm, const std::vector<ProcessGroup*>& groups);

}  // namespace titan::distributed
