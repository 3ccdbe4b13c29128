// A block of a model's residual stream whose computation parallelize may
// wrap from outside: activation checkpointing, offload and FSDP's gathering
// install a runner around the block's body without the model knowing. The
// body maps one tensor (the stream entering the block) to one tensor (the
// stream leaving it); a block whose inputs are several (FLUX's image and
// text streams and their conditioning vector) carries them in one tensor, so
// that every runner sees, saves and differentiates all of them.
#pragma once

#include <functional>
#include <utility>

#include "titan/nn/module.h"

namespace titan::nn {

// The body a runner receives computes the block on its input and is safe to
// call again later (during backward).
using BlockBody = std::function<Tensor(const Tensor& x)>;
using BlockRunner = std::function<Tensor(const BlockBody& body, const Tensor& x)>;

class Block : public Module {
 public:
  void set_runner(BlockRunner runner) { runner_ = std::move(runner); }
  const BlockRunner& runner() const { return runner_; }

 protected:
  // `body` on `x` through the runner, or directly without one.
  Tensor run(const BlockBody& body, const Tensor& x) const { return runner_ ? runner_(body, x) : body(x); }

 private:
  BlockRunner runner_;
};

}  // namespace titan::nn
