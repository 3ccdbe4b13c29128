#include "titan/parallel/fsdp.h"

#include <algorithm>

#include "titan/autograd/engine.h"
#include "titan/autograd/function_node.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/copy.h"
#include "titan/nn/functional.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/float8.h"

namespace titan::parallel {

ReshardPolicy parse_reshard_policy(const std::string& name) {
  if (name == "always") return ReshardPolicy::always;
  if (name == "never") return ReshardPolicy::never;
  if (name == "default") return ReshardPolicy::default_policy;
  fail("fsdp reshard_after_forward '{}' is not one of always, never, default", name);
}

namespace {
// The float8 all-gather's codes: e4m3, as torchao's tensorwise weights.
constexpr ops::Float8Format kGatherFormat = ops::Float8Format::e4m3;
}  // namespace

// One bucket of parameters gathered and reduced together.
//
// Layout: parameter i has N_i rows of R_i elements, cut into W chunks of
// c_i = ceil(N_i / W) rows (the last ones shorter or empty). Rank r stores
// rows [r c_i, r c_i + n_i(r)). The unit's local buffer concatenates every
// parameter's chunk padded to c_i rows (L elements in all), so one all-gather
// of L elements per rank yields every full parameter, and one reduce-scatter
// of a W x L gradient bucket yields every shard gradient. Frozen parameters
// (requires_grad false: LoRA's base weights) are gathered like the others but
// have no place in the gradient bucket (G <= L elements per rank), so their
// gradients are neither computed nor reduced.
//
// Float8 all-gather (nn::Parameter::float8_all_gather): such a weight is not
// in the local buffer that is gathered in the compute dtype but in a second
// one of fp8 codes, gathered alongside. Each rank casts its chunk with the
// tensorwise scale of the whole weight (from the max of every shard's amax:
// an all-reduce per gather, or one per step for every unit when the scales
// are precomputed), and the gathered codes decode exactly into the full
// weight, which the float8 Linear takes with its scale, cast already.
class FsdpUnit {
  struct Entry {
    nn::Parameter* parameter;
    Shape full_shape;
    int64_t dim;  // the one split: the first that is not 1
    int64_t rows, row_size, chunk_rows, local_offset, full_offset;
    int64_t grad_offset = -1;   // in a rank's part of the gradient bucket; -1: frozen
    int64_t float8_index = -1;  // among the unit's float8-gathered weights (their scales); -1: gathered in bf16
    int64_t gather_offset = 0;  // in a rank's part of its all-gather: the compute dtype's, or the float8 one
  };

  // The uses of the unit's weights recorded in one forward (one micro-batch
  // of a pipeline stage, or everything since the last finish without
  // pipelining) and how many of their gradients have arrived: the unit is
  // complete for that forward when all have.
  struct Uses {
    size_t expected = 0, arrived = 0;
    bool in_backward = false;  // its block's backward began (a split backward's weight half may still need the weights)
  };

 public:
  FsdpUnit(std::string name, const std::vector<nn::Parameter*>& parameters,
           std::shared_ptr<comm::ProcessGroup> shard_group, comm::ProcessGroup& replicate_group,
           const FsdpOptions& options, float gradient_scale, Fsdp& owner)
      : name_(std::move(name)),
        owner_(owner),
        shard_group_(std::move(shard_group)),
        shard_(*shard_group_),
        replicate_(replicate_group),
        options_(options),
        gradient_scale_(gradient_scale),
        device_(options.device) {
    const int64_t world = shard_.size(), rank = shard_.rank();
    int64_t full_offset = 0;
    for (nn::Parameter* parameter : parameters) {
      const Tensor full = parameter->data;
      TITAN_CHECK(full.dim() >= 1 && full.dtype() == DType::f32,
                  "fsdp unit {}: parameters must be f32 tensors of >= 1 dims", name_);
      TITAN_CHECK(full.device() == device_ || full.device().is_meta(),
                  "fsdp unit {}: a parameter on {}, FSDP's buffers on {}", name_, full.device().str(), device_.str());
      // Rows along the first dim that is not 1: leading dims of 1 (one
      // expert per ep rank, [1, H, D]) cannot split, and the rows after them
      // are as contiguous as dim 0's (TorchTitan shards such experts on dim 1).
      int64_t dim = 0;
      while (dim + 1 < full.dim() && full.size(dim) == 1) ++dim;
      Entry e{parameter, full.shape(), dim, full.size(dim), full.size(dim) > 0 ? full.numel() / full.size(dim) : 0, 0,
              0,         full_offset};
      e.chunk_rows = (e.rows + world - 1) / world;
      e.local_offset = local_size_;
      local_size_ += e.chunk_rows * e.row_size;
      if (parameter->float8_all_gather) {
        e.float8_index = static_cast<int64_t>(float8_count_++);
        e.gather_offset = float8_size_;
        float8_size_ += e.chunk_rows * e.row_size;
      } else {
        e.gather_offset = compute_size_;
        compute_size_ += e.chunk_rows * e.row_size;
      }
      const bool trainable = full.requires_grad();
      if (trainable) {
        e.grad_offset = grad_size_;
        grad_size_ += e.chunk_rows * e.row_size;
      }
      full_offset += full.numel();
      entries_.push_back(e);
      // This rank keeps its rows as the new leaf; the full tensor is dropped.
      const int64_t begin = std::min(e.rows, rank * e.chunk_rows), count = rows_on(e, rank);
      Tensor shard = full.narrow(dim, begin, count).clone();
      shard.set_requires_grad(trainable);
      parameter->data = shard;
      if (!parameter->layout.sharded()) parameter->layout = {full.shape(), Shape(static_cast<size_t>(full.dim()), 0)};
      parameter->layout.offsets[static_cast<size_t>(dim)] += begin;
    }
    full_ = Tensor::unallocated({full_offset}, options_.param_dtype, device_);
    for (const Entry& e : entries_)
      full_views_.push_back(full_.narrow(0, e.full_offset, shape_numel(e.full_shape)).view(e.full_shape));
  }

  static int64_t rows_on(const Entry& e, int64_t rank) {
    return std::clamp<int64_t>(e.rows - rank * e.chunk_rows, 0, e.chunk_rows);
  }

  void unshard_async() {
    if (state_ != State::sharded) return;
    full_.storage()->reallocate();
    scales_ = float8_scales();
    const int64_t world = shard_.size();
    if (world == 1 && float8_count_ == 0) {
      for (size_t i = 0; i < entries_.size(); ++i) titan::copy_(full_views_[i], entries_[i].parameter->data);
      state_ = State::unsharded;
      return;
    }
    Tensor send = Tensor::zeros({compute_size_}, options_.param_dtype, device_);
    Tensor send8 = Tensor::zeros({float8_size_}, ops::float8_dtype(kGatherFormat), device_);
    for (const Entry& e : entries_) {
      const Tensor& shard = e.parameter->data;
      if (shard.numel() == 0) continue;
      if (e.float8_index >= 0) {
        ops::float8_encode(send8.narrow(0, e.gather_offset, shard.numel()), shard.contiguous().view({-1}), scales_,
                           e.float8_index);
      } else {
        titan::copy_(send.narrow(0, e.gather_offset, shard.numel()).view(shard.shape()), shard);
      }
    }
    state_ = State::gathering;
    if (world == 1) {  // nothing to gather: the unpacking decodes the float8 weights
      gathered_ = send;
      gathered8_ = send8;
      return;
    }
    // In flight across the forward of the block that prefetched it.
    const auto gather = [this, world](const Tensor& local, Tensor& gathered) -> std::shared_ptr<comm::Work> {
      if (local.numel() == 0) return nullptr;
      gathered = Tensor::empty({world * local.numel()}, local.dtype(), device_);
      local.storage()->keep_on_device();
      gathered.storage()->keep_on_device();
      return shard_.all_gather(gathered, local);
    };
    gather_work_ = gather(send, gathered_);
    gather8_work_ = gather(send8, gathered8_);
  }

  void wait_unsharded() {
    unshard_async();
    if (state_ != State::gathering) return;
    for (std::shared_ptr<comm::Work>* work : {&gather_work_, &gather8_work_}) {
      if (*work) (*work)->wait();
      work->reset();
    }
    const int64_t world = shard_.size();
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      const Tensor flat = full_views_[i].view({-1});
      const bool float8 = e.float8_index >= 0;
      const Tensor& gathered = float8 ? gathered8_ : gathered_;
      const int64_t rank_size = float8 ? float8_size_ : compute_size_;
      for (int64_t r = 0; r < world; ++r) {
        const int64_t count = rows_on(e, r) * e.row_size;
        if (count == 0) continue;
        const Tensor to = flat.narrow(0, r * e.chunk_rows * e.row_size, count),
                     from = gathered.narrow(0, r * rank_size + e.gather_offset, count);
        if (float8) {
          ops::float8_decode(to, from);
        } else {
          titan::copy_(to, from);
        }
      }
    }
    gathered_ = Tensor();
    gathered8_ = Tensor();
    state_ = State::unsharded;
  }

  // This rank's amax of each float8-gathered weight's shard.
  Tensor local_float8_amaxes() const {
    std::vector<Tensor> shards;
    for (const Entry& e : entries_) {
      if (e.float8_index >= 0) shards.push_back(e.parameter->data.contiguous());
    }
    return ops::float8_amaxes(shards);
  }

  // The scales of the float8-gathered weights (undefined if none): the
  // precomputed ones, else from the whole weights' amaxes, maxima over the shards.
  Tensor float8_scales() {
    if (float8_count_ == 0) return Tensor();
    if (precomputed_scales_.defined()) return precomputed_scales_;
    Tensor amaxes = local_float8_amaxes();
    if (shard_.size() > 1) shard_.all_reduce(amaxes, comm::ReduceOp::max)->wait();
    return ops::float8_scales_from_amaxes(amaxes, kGatherFormat);
  }

  // The master weights of the unit, gathered in f32.
  std::vector<std::pair<nn::Parameter*, Tensor>> gather_f32() {
    const int64_t world = shard_.size();
    Tensor send = Tensor::zeros({local_size_}, DType::f32, device_);
    for (const Entry& e : entries_) {
      const Tensor& shard = e.parameter->data;
      if (shard.numel() > 0) titan::copy_(send.narrow(0, e.local_offset, shard.numel()).view(shard.shape()), shard);
    }
    Tensor gathered = Tensor::empty({world * local_size_}, DType::f32, device_);
    shard_.all_gather(gathered, send)->wait();
    std::vector<std::pair<nn::Parameter*, Tensor>> result;
    for (const Entry& e : entries_) {
      Tensor full = Tensor::empty(e.full_shape, DType::f32, device_);
      const Tensor flat = full.view({-1});
      for (int64_t r = 0; r < world; ++r) {
        const int64_t count = rows_on(e, r) * e.row_size;
        if (count > 0) {
          titan::copy_(flat.narrow(0, r * e.chunk_rows * e.row_size, count),
                       gathered.narrow(0, r * local_size_ + e.local_offset, count));
        }
      }
      result.emplace_back(e.parameter, full);
    }
    return result;
  }

  void reshard() {
    if (state_ == State::gathering) wait_unsharded();
    if (state_ != State::unsharded) return;
    full_.storage()->release_memory();
    state_ = State::sharded;
  }

  // The full parameter i for forward: an autograd op whose backward hands the
  // gradient to the unit (which reduce-scatters it) instead of to the leaf.
  Tensor materialize(size_t i) {
    TITAN_CHECK(entries_[i].float8_index < 0,
                "fsdp unit {}: a weight gathered as float8 (quantize.linear.float8.enable_fsdp_float8_all_gather) is "
                "read other than by its float8 Linear (a tied weight?); turn the float8 all-gather off",
                name_);
    return record_use(i);
  }

  // A float8-gathered weight i for its Linear: the fp8 values (the gradient
  // passing straight through to the shard) and their scale.
  ops::Float8Operand materialize_float8(size_t i) {
    const Tensor values = record_use(i);
    return {values, scales_.narrow(0, entries_[i].float8_index, 1)};
  }

  Tensor record_use(size_t i) {
    wait_unsharded();
    Tensor full = full_views_[i].detach();
    const std::shared_ptr<Uses> uses = current_uses();
    const bool recorded = autograd::record("FsdpAllGatherBackward", {&entries_[i].parameter->data}, {&full},
                                           [this, i, uses](const auto& grads) {
                                             accumulate_grad(i, grads[0]);
                                             arrived(*uses);
                                             return std::vector<Tensor>{Tensor()};
                                           });
    // A parameter may be used more than once (tied embeddings): the unit is
    // complete when every recorded use has delivered its gradient.
    if (recorded) {
      ++uses->expected;
      ++outstanding_;
    }
    return full;
  }

  void accumulate_grad(size_t i, const Tensor& grad) {
    if (!grad.defined()) return;
    const Entry& e = entries_[i];
    const int64_t world = shard_.size();
    TITAN_CHECK(e.grad_offset >= 0, "fsdp unit {}: a gradient arrived for a frozen parameter", name_);
    // The bucket is the send buffer of a reduce-scatter still in flight
    // (an earlier pipeline micro-batch's): finish it, start a new bucket.
    if (reduce_work_) complete_reduction();
    if (!bucket_.defined()) bucket_ = Tensor::zeros({world * grad_size_}, DType::f32, device_);
    const Tensor flat = grad.contiguous().view({-1});
    for (int64_t r = 0; r < world; ++r) {
      const int64_t count = rows_on(e, r) * e.row_size;
      if (count == 0) continue;
      ops::add_(bucket_.narrow(0, r * grad_size_ + e.grad_offset, count),
                flat.narrow(0, r * e.chunk_rows * e.row_size, count).to(DType::f32));
    }
  }

  void arrived(Uses& uses) {
    --outstanding_;
    if (++uses.arrived < uses.expected) return;
    if (uses.in_backward) --in_backward_;
    uses.in_backward = false;
    if (owner_.reduce_in_backward_) reduce_async();
  }

  // The backward of the forward that recorded `uses` begins (a wrapped
  // block's output gradient arrived): until every gradient of those uses is
  // in, the unit stays gathered, since the weight half of a split backward
  // (zero-bubble schedules) may run after other actions and still read
  // weights (a norm's backward does).
  void backward_begins(Uses& uses) {
    if (uses.in_backward || uses.arrived == uses.expected) return;
    uses.in_backward = true;
    ++in_backward_;
  }

  // Frees the gathered weights unless they may still be read: a wrapped
  // block's while one of its backwards is under way (they are gathered again
  // before each of its backwards begins), any other unit's while any use
  // recorded in a forward still waits for its gradient (pipeline
  // micro-batches in flight).
  void reshard_when_unused() {
    if (regathered_for_backward_ ? in_backward_ == 0 : outstanding_ == 0) reshard();
  }

  // A unit with frozen parameters: their gathered weights serve the block's
  // backward (input gradients) even after every trainable gradient arrived, so
  // the unit is complete only once the gradient of the block's input has been
  // computed too. (Frozen weights are used in backward only for an input that
  // requires grad: through a trainable parameter earlier in the block, whose
  // gradient comes later, or through the block input, tracked here.)
  Tensor track_input(const Tensor& x) {
    if (grad_size_ == local_size_ || !x.requires_grad() || !autograd::grad_enabled()) return x;
    const std::shared_ptr<Uses> uses = current_uses();
    ++uses->expected;
    ++outstanding_;
    return F::observe_gradient(x, [this, uses](const Tensor&) { arrived(*uses); });
  }

  // Every gradient of the unit is in: reduce-scatter them (averaged over the
  // shards) while backward goes on, and free the gathered parameters. The
  // bucket (a full-size f32 gradient) lives only while its reduction is in
  // flight: at most one unit's is, as in FSDP2, so starting this reduction
  // first completes the previous unit's, which had a whole block's backward
  // to finish in. Without that, backward would hold a full f32 gradient of
  // every unit, the whole model's, until finish_backward.
  //
  // Under pipeline parallelism a unit may reduce once per micro-batch
  // (set_reduce_in_backward): each reduction's shard gradients add into
  // those of the earlier ones (reduce-scatter is linear, so this equals one
  // reduction of the summed buckets).
  void reduce_async() {
    if (!bucket_.defined() || reduce_work_) return;
    if (gradient_scale_ != 1.0f) ops::scale_(bucket_, gradient_scale_);
    if (shard_.size() == 1) {
      add_reduced(bucket_);
      bucket_ = Tensor();
    } else {
      receiving_ = Tensor::empty({grad_size_}, DType::f32, device_);
      reduce_work_ = shard_.reduce_scatter(receiving_, bucket_, comm::ReduceOp::avg);
      if (owner_.reducing_ != nullptr && owner_.reducing_ != this) owner_.reducing_->complete_reduction();
      owner_.reducing_ = this;
      if (reduce_work_->completed()) complete_reduction();
    }
    reshard_when_unused();
  }

  // Waits for the reduce-scatter in flight and frees its bucket.
  void complete_reduction() {
    if (reduce_work_) reduce_work_->wait();
    reduce_work_.reset();
    bucket_ = Tensor();
    if (receiving_.defined()) add_reduced(receiving_);
    receiving_ = Tensor();
    if (owner_.reducing_ == this) owner_.reducing_ = nullptr;
  }

  void add_reduced(const Tensor& shard_gradients) {
    if (reduced_.defined()) {
      ops::add_(reduced_, shard_gradients);
    } else {
      reduced_ = shard_gradients;
    }
  }

  // Waits for the reduction and adds this rank's shard gradients into the
  // leaves; with sync_replicas, averages the accumulated shard gradients over
  // the replicate group (HSDP / DDP) first.
  void finish(bool sync_replicas) {
    reduce_async();
    complete_reduction();
    if (reduced_.defined()) {
      for (const Entry& e : entries_) {
        Tensor& shard = e.parameter->data;
        if (e.grad_offset < 0) continue;
        if (shard.numel() == 0) {
          if (!shard.grad().defined()) shard.set_grad(Tensor::zeros(shard.shape(), DType::f32, device_));
          continue;
        }
        const Tensor piece = reduced_.narrow(0, e.grad_offset, shard.numel()).view(shard.shape());
        if (shard.grad().defined()) {
          ops::add_(shard.grad(), piece);
        } else {
          shard.set_grad(piece.clone());
        }
      }
    }
    reduced_ = Tensor();
    uses_.reset();
    outstanding_ = 0;
    in_backward_ = 0;
    reshard();
    if (sync_replicas && replicate_.size() > 1) all_reduce_replicas();
  }

 private:
  enum class State { sharded, gathering, unsharded };

  std::shared_ptr<Uses> current_uses() {
    if (!uses_ || uses_pass_ != owner_.forward_pass_) {
      uses_ = std::make_shared<Uses>();
      uses_pass_ = owner_.forward_pass_;
    }
    return uses_;
  }

  // One all-reduce over the replicas for the whole unit's shard gradients.
  void all_reduce_replicas() {
    if (grad_size_ == 0) return;
    Tensor flat = Tensor::zeros({grad_size_}, DType::f32, device_);
    for (const Entry& e : entries_) {
      const Tensor& grad = e.parameter->data.grad();
      if (e.grad_offset >= 0 && grad.defined() && grad.numel() > 0)
        titan::copy_(flat.narrow(0, e.grad_offset, grad.numel()).view(grad.shape()), grad);
    }
    replicate_.all_reduce(flat, comm::ReduceOp::avg)->wait();
    for (const Entry& e : entries_) {
      const Tensor& grad = e.parameter->data.grad();
      if (e.grad_offset >= 0 && grad.defined() && grad.numel() > 0)
        titan::copy_(grad, flat.narrow(0, e.grad_offset, grad.numel()).view(grad.shape()));
    }
  }

  std::string name_;
  Fsdp& owner_;  // its settings, its forward pass, and which unit's reduce-scatter is in flight
  std::shared_ptr<comm::ProcessGroup> shard_group_;
  comm::ProcessGroup& shard_;
  comm::ProcessGroup& replicate_;
  FsdpOptions options_;
  float gradient_scale_;
  Device device_;  // where the unit's parameters live: every buffer goes there

  std::vector<Entry> entries_;
  int64_t local_size_ = 0;     // a rank's chunks of every parameter (the f32 master's gather)
  int64_t compute_size_ = 0;   // of those gathered in the compute dtype
  int64_t float8_size_ = 0;    // of those gathered as float8 codes
  size_t float8_count_ = 0;    // how many are
  Tensor scales_;              // the float8 weights' scales of the current gather
  Tensor precomputed_scales_;  // set once per step by Fsdp::after_optimizer_step when precomputing
  int64_t grad_size_ = 0;      // the trainable parameters' part of local_size_
  Tensor full_, gathered_, gathered8_;
  std::vector<Tensor> full_views_;
  std::shared_ptr<comm::Work> gather_work_, gather8_work_, reduce_work_;
  State state_ = State::sharded;
  Tensor bucket_;     // this rank's full-size f32 gradients, filling (or being reduce-scattered)
  Tensor receiving_;  // the shard gradients of the reduce-scatter in flight
  Tensor reduced_;    // the shard gradients reduced so far this backward
  std::shared_ptr<Uses> uses_;
  uint64_t uses_pass_ = 0;                // the Fsdp's forward pass that uses_ counts
  size_t outstanding_ = 0;                // uses recorded, of every forward, whose gradients have not arrived
  size_t in_backward_ = 0;                // forwards whose backward began and whose gradients have not all arrived
  bool regathered_for_backward_ = false;  // a wrapped block's: gathered again before each of its backwards

  friend class Fsdp;
};

Fsdp::Fsdp(std::shared_ptr<comm::ProcessGroup> shard_group, std::shared_ptr<comm::ProcessGroup> replicate_group,
           FsdpOptions options)
    : shard_group_(std::move(shard_group)), replicate_group_(std::move(replicate_group)), options_(options) {}

Fsdp::~Fsdp() = default;

size_t Fsdp::add_unit(const std::string& name, const std::vector<nn::Parameter*>& parameters) {
  return add_unit(name, parameters, shard_group_, 1.0f);
}

size_t Fsdp::add_unit(const std::string& name, const std::vector<nn::Parameter*>& parameters,
                      std::shared_ptr<comm::ProcessGroup> shard_group, float gradient_scale) {
  auto unit = std::make_unique<FsdpUnit>(name, parameters, std::move(shard_group), *replicate_group_, options_,
                                         gradient_scale, *this);
  FsdpUnit* raw = unit.get();
  for (size_t i = 0; i < parameters.size(); ++i) {
    parameters[i]->parametrizations.push_back([raw, i](const Tensor&) { return raw->materialize(i); });
    if (parameters[i]->float8_all_gather) {
      parameters[i]->float8_parametrization = [raw, i] { return raw->materialize_float8(i); };
    }
  }
  units_.push_back(std::move(unit));
  return units_.size() - 1;
}

void Fsdp::wrap_block(nn::Block& block, const std::vector<size_t>& indices, bool reshard) {
  std::vector<FsdpUnit*> units;
  units.reserve(indices.size());
  for (size_t index : indices) {
    units.push_back(units_.at(index).get());
    units.back()->regathered_for_backward_ = true;
  }
  const size_t position = block_units_.size();
  block_units_.push_back(units);
  // Neighbours are looked up when the block runs: the next block's units are added after this one is wrapped.
  const std::vector<std::vector<FsdpUnit*>>* chain = &block_units_;
  const auto neighbour = [chain](size_t at) { return at < chain->size() ? (*chain)[at] : std::vector<FsdpUnit*>{}; };
  const nn::BlockRunner inner = block.runner();
  block.set_runner([units, neighbour, position, inner, reshard](const nn::BlockBody& body, const Tensor& x) {
    for (FsdpUnit* unit : units) unit->wait_unsharded();
    for (FsdpUnit* next : neighbour(position + 1)) next->unshard_async();  // overlaps this block's compute
    // Only the block's own unit may hold frozen weights (LoRA's base): experts are never adapted.
    const Tensor input = units.front()->track_input(x);
    Tensor y = inner ? inner(body, input) : body(input);
    const auto reshard_all = [&units] {
      for (FsdpUnit* unit : units) unit->reshard_when_unused();
    };
    if (reshard && !autograd::grad_enabled()) reshard_all();
    if (y.requires_grad()) {
      if (reshard) reshard_all();
      std::vector<std::shared_ptr<FsdpUnit::Uses>> uses;
      uses.reserve(units.size());
      for (FsdpUnit* unit : units) uses.push_back(unit->current_uses());
      // Before this block's backward: gather it again (no-op if never freed), prefetch the one before.
      const std::vector<FsdpUnit*> previous = position > 0 ? neighbour(position - 1) : std::vector<FsdpUnit*>{};
      autograd::register_hook(y, [units, uses, previous](const Tensor&) {
        for (size_t i = 0; i < units.size(); ++i) {
          units[i]->backward_begins(*uses[i]);
          units[i]->wait_unsharded();
        }
        for (FsdpUnit* unit : previous) unit->unshard_async();
        return Tensor();
      });
    }
    return y;
  });
}

void Fsdp::reshard_after_forward(nn::Module& module, size_t index) {
  FsdpUnit* unit = units_.at(index).get();
  module.output_hooks.push_back([unit](const Tensor& y) {
    unit->reshard();
    return y;
  });
}

void Fsdp::for_each_full_parameter(const std::function<void(nn::Parameter*, const Tensor&)>& use) {
  for (auto& unit : units_) {
    for (const auto& [parameter, full] : unit->gather_f32()) use(parameter, full);
  }
}

void Fsdp::after_optimizer_step() {
  if (!options_.precompute_float8_scales) return;
  // One all-reduce for every unit on the main shard group; a unit sharded
  // over another (experts: never float8 Linears today) computes its own.
  std::vector<FsdpUnit*> batched;
  std::vector<Tensor> amaxes;
  for (auto& unit : units_) {
    if (unit->float8_count_ == 0) continue;
    unit->precomputed_scales_ = Tensor();
    if (unit->shard_group_ != shard_group_) {
      unit->precomputed_scales_ = unit->float8_scales();
      continue;
    }
    batched.push_back(unit.get());
    amaxes.push_back(unit->local_float8_amaxes());
  }
  if (batched.empty()) return;
  int64_t total = 0;
  for (const FsdpUnit* unit : batched) total += static_cast<int64_t>(unit->float8_count_);
  Tensor all = Tensor::empty({total}, DType::f32, options_.device);
  int64_t at = 0;
  for (const Tensor& unit_amaxes : amaxes) {
    titan::copy_(all.narrow(0, at, unit_amaxes.numel()), unit_amaxes);
    at += unit_amaxes.numel();
  }
  if (shard_group_->size() > 1) shard_group_->all_reduce(all, comm::ReduceOp::max)->wait();
  const Tensor scales = ops::float8_scales_from_amaxes(all, kGatherFormat);
  int64_t offset = 0;
  for (FsdpUnit* unit : batched) {
    const auto count = static_cast<int64_t>(unit->float8_count_);
    unit->precomputed_scales_ = scales.narrow(0, offset, count).contiguous();
    offset += count;
  }
}

void Fsdp::finish_backward() {
  for (auto& unit : units_) unit->finish(sync_replicas_);
}

}  // namespace titan::parallel
