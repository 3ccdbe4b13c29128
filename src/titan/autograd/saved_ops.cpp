#include "titan/autograd/saved_ops.h"

#include "titan/core/error.h"

namespace titan::autograd {

struct SavedOpScope::State {
  SavedOpOutputs* outputs = nullptr;
  bool replay = false;
  int64_t matmuls = 0;  // counted as TorchTitan counts them: forced recomputes excluded
  size_t next = 0;      // replay: the next kept entry to hand back
  bool inside = false;  // within an op's compute: ops it calls are part of it, not counted
};

namespace {

thread_local SavedOpScope::State* active = nullptr;

}  // namespace

size_t SavedOpOutputs::bytes() const {
  size_t total = 0;
  for (const auto& outputs : kept) {
    for (const Tensor& tensor : outputs) total += tensor.defined() ? tensor.nbytes() : 0;
  }
  return total;
}

SavedOpScope::SavedOpScope(SavedOpOutputs& outputs, bool replay)
    : state_(std::make_unique<State>()), previous_(active) {
  state_->outputs = &outputs;
  state_->replay = replay;
  active = state_.get();
}

SavedOpScope::~SavedOpScope() { active = previous_; }

void SavedOpScope::check_all_taken() const {
  TITAN_CHECK(state_->next == state_->outputs->kept.size(),
              "per-op selective checkpointing: the recompute used {} of the {} kept op outputs (the block ran "
              "differently the second time)",
              state_->next, state_->outputs->kept.size());
}

std::vector<Tensor> run_saved_op(SavedOpKind kind, const Shape& weight_shape,
                                 const std::function<std::vector<Tensor>()>& compute) {
  SavedOpScope::State* state = active;
  if (state == nullptr || state->inside) return compute();
  const auto run = [&] {
    state->inside = true;
    try {
      std::vector<Tensor> outputs = compute();
      state->inside = false;
      return outputs;
    } catch (...) {
      state->inside = false;
      throw;
    }
  };
  bool keep = true;
  if (kind == SavedOpKind::matmul) {
    const auto& forced = state->outputs->policy.recompute_mm_shapes;
    if (weight_shape.size() == 2 && forced.count({weight_shape[0], weight_shape[1]}) != 0) return run();
    keep = ++state->matmuls % 2 == 1;  // the 1st, 3rd, ... matmul is kept; the others recomputed
  }
  if (!keep) return run();
  if (state->replay) {
    TITAN_CHECK(state->next < state->outputs->kept.size(),
                "per-op selective checkpointing: the recompute asked for more kept op outputs than the forward kept "
                "({})",
                state->outputs->kept.size());
    return state->outputs->kept[state->next++];
  }
  std::vector<Tensor> outputs = run();
  std::vector<Tensor> kept;
  kept.reserve(outputs.size());
  for (const Tensor& output : outputs) kept.push_back(output.defined() ? output.detach() : output);
  state->outputs->kept.push_back(std::move(kept));
  return outputs;
}

}  // namespace titan::autograd
