// Module: a node of the model tree with named parameters, buffers and
// children. Fully-qualified names ("layers.3.attention.wq.weight") come from
// the tree and are what checkpoints, TP plans and the HF adapter key on.
// A parameter is stored once (f32 master weights, or this rank's shard) and
// reaches forward through its parametrization (identity, dtype cast, FSDP
// all-gather): installed from outside by parallelize, never by model code.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/profiler.h"
#include "titan/core/tensor.h"
#include "titan/core/trace_context.h"
#include "titan/nn/init_rule.h"
#include "titan/ops/float8.h"

namespace titan::nn {

using Parametrization = std::function<Tensor(const Tensor& stored)>;

// Where a stored tensor sits in the full tensor it is part of, when
// parallelism shards it: a box of the stored tensor's shape at `offsets` in
// `global_shape`. Empty global_shape: the stored tensor is the full one.
struct ShardLayout {
  Shape global_shape;
  Shape offsets;
  bool sharded() const { return !global_shape.empty(); }
  // For a stored tensor of shape `stored`: the whole tensor's shape, and the
  // stored box's offsets in it (an unsharded tensor is its own whole, at 0).
  Shape whole_shape(const Shape& stored) const { return sharded() ? global_shape : stored; }
  Shape offsets_in_whole(const Shape& stored) const { return sharded() ? offsets : Shape(stored.size(), 0); }
};

struct Parameter {
  Tensor data;  // the stored leaf (requires grad)
  // Applied in order by materialize(); empty means identity.
  std::vector<Parametrization> parametrizations;
  ShardLayout layout;
  // Tensor parallelism: the dim this parameter is split along across the tp
  // group (-1: every tp rank holds all of it, and its gradients from each
  // rank's share of the sequence must be summed).
  int64_t tensor_parallel_dim = -1;
  // Expert parallelism: split along dim 0 (experts) over the ep group.
  bool expert_parallel = false;
  // How nn::initialize draws it (declared by its module).
  InitRule init;
  // Float8 training with quantize.linear.float8.enable_fsdp_float8_all_gather
  // (set by models/float8_plan.h on a converted Linear's weight): whoever
  // materialises it casts it to e4m3 from the f32 master with one tensorwise
  // scale (FSDP: each shard before the all-gather, with the whole weight's
  // amax) and installs float8_parametrization, which the Linear then uses
  // instead of materialize(): {the cast values, their scale}.
  bool float8_all_gather = false;
  std::function<ops::Float8Operand()> float8_parametrization;

  // The tensor forward uses this step.
  Tensor materialize() const;
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Recursive, in registration order, with fully-qualified names.
  std::vector<std::pair<std::string, Parameter*>> named_parameters(const std::string& prefix = "");
  std::vector<std::pair<std::string, Tensor*>> named_buffers(const std::string& prefix = "");
  // The buffers saved with the model (checkpoints, exports): state, not scratch.
  std::vector<std::pair<std::string, Tensor*>> named_persistent_buffers(const std::string& prefix = "");
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  std::vector<Tensor> parameters();
  int64_t num_parameters();

  // Parameters' stored tensors, then persistent buffers, in registration order
  // (sharing memory): what checkpoints and exports hold.
  std::vector<std::pair<std::string, Tensor>> named_state();
  // The same by name.
  std::map<std::string, Tensor> state_dict();
  // Copies values in (casting dtype). Strict: every name must match both ways,
  // and shapes must agree; errors name the tensor.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // Converts every floating parameter and buffer (parameters stay leaves requiring grad).
  void to(DType dtype);
  void to(Device device);
  // Replaces every parameter and buffer with uninitialised storage on `device`
  // (a meta-built model becomes real before nn::initialize fills it).
  void to_empty(Device device);
  // Clears every parameter's gradient.
  void zero_grad();
  // Drops child `name` and everything under it (a pipeline stage keeping only its part of a model).
  void remove_child(const std::string& name);

  // Gives this module and every module under it its fully-qualified name, for
  // the profiler and the memory recorder (the root of a model calls it once built).
  void name_modules(const std::string& prefix = "");
  const std::string& trace_name() const { return trace_name_; }

  // Redistributions installed from outside (tensor/sequence parallelism):
  // forward applies input_hooks to its input and output_hooks to its result.
  // Empty by default, so the module is plain single-device code.
  std::vector<std::function<Tensor(const Tensor&)>> input_hooks, output_hooks;

 protected:
  // Opened at the top of every forward: the ops and allocations inside belong
  // to this module (trace::current_module), and the profiler draws its span.
  class ForwardScope {
   public:
    explicit ForwardScope(const Module& module) : module_(&module.trace_name_), span_("module", module.trace_name_) {}

   private:
    trace::ModuleScope module_;
    profiler::Span span_;
  };

  Tensor pre_forward(const Tensor& input) const;
  Tensor post_forward(const Tensor& output) const;
  Parameter* register_parameter(const std::string& name, Tensor data);
  Tensor* register_buffer(const std::string& name, Tensor data, bool persistent = true);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  struct Buffer {
    Tensor data;
    bool persistent;
  };
  std::vector<std::pair<std::string, std::unique_ptr<Parameter>>> parameters_;
  std::vector<std::pair<std::string, std::unique_ptr<Buffer>>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::string trace_name_;

  void for_each_tensor(const std::function<Tensor(const Tensor&, bool is_parameter)>& convert);
};

}  // namespace titan::nn
