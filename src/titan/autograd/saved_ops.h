// Per-op selective activation checkpointing (TorchTitan's
// activation_checkpoint.selective_ac_option = "op"): inside a checkpointed
// block, the outputs of chosen ops are kept from the forward and handed back
// when backward recomputes the block, so the recompute skips them; every
// other op is recomputed. TorchTitan's policy, followed here: keep the
// outputs of attention, of the sequence-parallel reduce-scatter, and of every
// other matmul (the 1st, 3rd, ... of the block; matmuls whose weight has a
// shape named in `recompute_mm_shapes`, e.g. the MoE router's gate, are
// always recomputed and not counted).
//
// An op takes part by running its computation through run_saved_op: with no
// block being checkpointed this is just compute(); during the block's
// forward it counts and keeps; during its recompute it counts the same way
// and returns what was kept instead of computing. The order of ops is the
// same both times (the block is deterministic), so the n-th kept op's outputs
// are the n-th handed back. Ops run inside another's compute are part of it
// and not counted.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::autograd {

enum class SavedOpKind { matmul, attention, reduce_scatter };

struct SavedOpPolicy {
  std::set<std::pair<int64_t, int64_t>> recompute_mm_shapes;  // weight shapes [out, in] always recomputed
};

// What one checkpointed block kept in its forward.
struct SavedOpOutputs {
  SavedOpPolicy policy;
  std::vector<std::vector<Tensor>> kept;
  size_t bytes() const;
};

// `weight_shape`: a matmul's weight ([out, in]; empty for other ops).
std::vector<Tensor> run_saved_op(SavedOpKind kind, const Shape& weight_shape,
                                 const std::function<std::vector<Tensor>()>& compute);

// While alive, ops on this thread keep their outputs into `outputs` (a
// block's forward) or, with `replay`, take them back from it in order (its
// recompute, which must take every one).
class SavedOpScope {
 public:
  SavedOpScope(SavedOpOutputs& outputs, bool replay);
  ~SavedOpScope();
  SavedOpScope(const SavedOpScope&) = delete;
  SavedOpScope& operator=(const SavedOpScope&) = delete;
  // Replay: every kept output was taken (else the recompute went another way).
  void check_all_taken() const;

  struct State;  // the counts of one block's run (saved_ops.cpp)

 private:
  std::unique_ptr<State> state_;
  State* previous_;
};

}  // namespace titan::autograd
