// What parallelize did to a model, and what a training step owes it after:
// FSDP's end-of-backward reductions, the sum over tensor-parallel ranks of
// the partial gradients of parameters they replicate, the gradient norm over
// every group that splits the parameters, and the full weights gathered back
// for an export. The trainer calls these without knowing which parallelisms
// are on; each is a no-op for the ones that are not.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "titan/comm/device_mesh.h"
#include "titan/nn/module.h"
#include "titan/parallel/context_parallel.h"
#include "titan/parallel/fsdp.h"

namespace titan::parallel {

class ParallelizedModel {
 public:
  // `pipelined`: this rank holds pipeline stages (their parameters are disjoint over pp).
  ParallelizedModel(const comm::DeviceMesh& mesh, bool pipelined) : mesh_(&mesh), pipelined_(pipelined) {}

  std::shared_ptr<Fsdp> fsdp;                     // null without data or context parallelism
  std::shared_ptr<RingAttention> ring_attention;  // null without context parallelism

  // Before each forward of a pipeline stage's micro-batch.
  void begin_micro_batch() {
    if (fsdp) fsdp->begin_forward_pass();
  }
  // After each backward (a micro-batch's, or a pipeline pass's): FSDP reduces
  // the gradients, across replicas too when `last_of_step`.
  void finish_backward(bool last_of_step);
  // After each optimizer step: FSDP precomputes the float8 all-gather's scales (when asked to).
  void after_optimizer_step() {
    if (fsdp) fsdp->after_optimizer_step();
  }
  // Sums the tensor-parallel partial gradients of replicated parameters (norms,
  // embeddings: each tp rank saw its part of the sequence), then clips every
  // gradient of `model` by the global norm, counting each disjoint part once.
  // Returns [norm, clipping factor] on `device`: no host read.
  Tensor synchronize_and_clip_gradients(nn::Module& model, double max_norm, Device device) const;
  // Every parameter of `model` whole (FSDP shards, tensor- and
  // expert-parallel parts gathered; a collective over the mesh), one at a
  // time (an FSDP unit's gathered together), each handed to `use` and dropped
  // after: a rank never holds the whole model. Split or not, all are handed over.
  void for_each_full_parameter(nn::Module& model, const std::function<void(nn::Parameter*, const Tensor&)>& use);

 private:
  const comm::DeviceMesh* mesh_;
  bool pipelined_;
};

}  // namespace titan::parallel
