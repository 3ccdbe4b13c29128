// Gradient norms when gradients are spread over ranks: each rank sums the
// squares of what it holds and the sums are all-reduced over the groups that
// split the parameters (dp_shard for FSDP shards, tp for tensor-parallel
// ones). The result stays on the device (see ops/grad_clip.h): clipping reads
// it there, so the step needs no host read.
#pragma once

#include <span>
#include <vector>

#include "titan/comm/process_group.h"
#include "titan/core/tensor.h"

namespace titan::parallel {

// The sum over `groups` of the local sums of squares of `grads`: a 1-element
// f32 tensor on `device` (zero when this rank holds no gradient).
Tensor grad_sum_squares(std::span<const Tensor> grads, const std::vector<comm::ProcessGroup*>& groups, Device device);

}  // namespace titan::parallel
