// Fully sharded data parallelism, SimpleFSDP-style: each parameter is stored
// as this rank's rows (a dim-0 shard, or of the first dim that is not 1; f32 master), and forward materialises it
// through its parametrization: an all-gather (in the compute dtype) whose
// backward is a reduce-scatter (in f32). Parameters are bucketed in units (one
// per transformer block, the embeddings, the norm and output): one collective per unit,
// not per tensor. HSDP adds an all-reduce of the shard gradients over the
// replicate group; with dp_shard = 1 this is plain DDP.
//
// Model code never sees any of it: parallelize installs the parametrizations
// and wraps each block's runner, which gathers the block's unit (prefetching
// the next one), frees it after forward when resharding, and registers a hook
// on the block output that re-gathers it before the block's backward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/comm/process_group.h"
#include "titan/nn/block.h"
#include "titan/nn/module.h"

namespace titan::parallel {

enum class ReshardPolicy { always, never, default_policy };
ReshardPolicy parse_reshard_policy(const std::string& name);

struct FsdpOptions {
  DType param_dtype = DType::bf16;  // what forward computes with (mixed_precision_param)
  ReshardPolicy reshard_after_forward = ReshardPolicy::default_policy;
  // Where the parameters live once materialised: FSDP may be applied to a
  // model still on the meta device, whose shards get storage afterwards.
  Device device = Device::cpu();
  // quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp: the
  // float8-gathered weights' scales are computed once per step, after the
  // optimizer, for every unit in one all-reduce (instead of one per gather).
  bool precompute_float8_scales = false;
};

class FsdpUnit;

class Fsdp {
 public:
  // shard_group: dp_shard (size 1: no sharding, DDP); replicate_group: dp_replicate.
  Fsdp(std::shared_ptr<comm::ProcessGroup> shard_group, std::shared_ptr<comm::ProcessGroup> replicate_group,
       FsdpOptions options);
  ~Fsdp();

  // Shards `parameters` (in place: each Parameter's data becomes this rank's
  // rows) into one unit; returns its index. Units are gathered in the order added.
  size_t add_unit(const std::string& name, const std::vector<nn::Parameter*>& parameters);
  // A unit sharded over its own group instead of shard_group, its reduced
  // gradients multiplied by `gradient_scale`: experts under expert
  // parallelism, sharded over dp_shard_mod_ep, whose gradients already sum
  // the tokens of the ep ranks (scale 1 / ep brings them to the data-parallel mean).
  size_t add_unit(const std::string& name, const std::vector<nn::Parameter*>& parameters,
                  std::shared_ptr<comm::ProcessGroup> shard_group, float gradient_scale);
  // Makes `block` run with its units gathered (prefetching the next wrapped
  // block's in forward, the previous one's in backward); `reshard` frees them
  // after the block's forward (re-gathered for backward). A block has one
  // unit, or two with expert parallelism (its experts sharded over their own
  // group). Wrap blocks in the order they run.
  void wrap_block(nn::Block& block, const std::vector<size_t>& units, bool reshard);
  // Frees unit `unit` once `module`'s forward has used it, for a module whose
  // backward needs no weights (an embedding: its gradient is a scatter of the
  // output gradient), so the unit is not gathered again for backward.
  void reshard_after_forward(nn::Module& module, size_t unit);

  // Whether this backward's gradients are reduced across replicas now (the
  // last micro-batch of a step) or kept local to accumulate (the others).
  void set_sync_replicas(bool sync) { sync_replicas_ = sync; }
  // Whether a unit reduce-scatters as soon as every use delivered its
  // gradient (overlapping the rest of backward), or only in finish_backward.
  // Pipeline parallelism defers by default: its micro-batches' backwards
  // interleave with forwards, and one reduction per step of the summed
  // gradients is all it needs, at the cost of a full-size f32 gradient per
  // unit of the stage all step. Reducing in backward under pipelining (with
  // begin_forward_pass before each micro-batch) reduces each micro-batch's
  // gradients as they complete: one unit's bucket at a time, pp micro-batches
  // times the reduce-scatters.
  void set_reduce_in_backward(bool reduce) { reduce_in_backward_ = reduce; }
  // A new forward begins (a pipeline stage's micro-batch): the uses of each
  // unit recorded from now on complete that unit when their gradients are
  // in, whatever other micro-batches' uses still wait for theirs.
  void begin_forward_pass() { ++forward_pass_; }
  // After autograd::backward: reduces what is still pending, waits for every
  // collective, adds the shard gradients into each parameter's .grad(), and
  // frees gathered parameters. Call once per backward.
  void finish_backward();

  // After each optimizer step: precomputes the float8 all-gather's scales
  // when the options say so.
  void after_optimizer_step();

  // The full f32 parameters of every unit, gathered from the shards (every
  // rank must call it; every rank gets them), one unit at a time: each is
  // handed to `use`, and the unit's are dropped before the next is gathered.
  void for_each_full_parameter(const std::function<void(nn::Parameter*, const Tensor&)>& use);

  size_t num_units() const { return units_.size(); }
  const comm::ProcessGroup& shard_group() const { return *shard_group_; }

 private:
  std::shared_ptr<comm::ProcessGroup> shard_group_, replicate_group_;
  FsdpOptions options_;
  std::vector<std::unique_ptr<FsdpUnit>> units_;
  std::vector<std::vector<FsdpUnit*>> block_units_;  // each block's, in the order they run: the prefetch chain
  bool sync_replicas_ = true;
  bool reduce_in_backward_ = true;
  uint64_t forward_pass_ = 0;
  FsdpUnit* reducing_ = nullptr;  // whose reduce-scatter is in flight (at most one)

  friend class FsdpUnit;
};

}  // namespace titan::parallel
