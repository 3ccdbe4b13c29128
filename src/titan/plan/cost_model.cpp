#include "titan/plan/cost_model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "titan/core/error.h"
#include "titan/plan/collective_cost.h"
#include "titan/plan/pipeline_timing.h"
#include "titan/plan/unit_work.h"
#include "titan/train/pipeline_plan.h"
#include "titan/train/torchtitan_keys.h"

namespace titan::plan {

ModelUnderPlan model_under_plan(const PlanRequest& request) {
  ModelUnderPlan model;
  const std::string family = train::titan_family(request.model, request.flavor);
  model.family = family;
  model.spec = &models::model_spec(family);
  model.config = model.spec->config(request.flavor, request.vocab_size);
  model.flops_per_token = model.spec->flops_per_token(model.config, request.seq_len);
  model.units = count_unit_parameters(*model.spec, model.config);
  return model;
}

train::MemoryBudget predict_memory(const ModelUnderPlan& model, const PlanRequest& request, const Layout& layout,
                                   const DeviceProfile& device) {
  train::JobConfig job;
  apply_layout(layout, request, job);
  // TorchTitan's cross-entropy materialises the logits and their gradient (titan's fused loss does not).
  if (request.software == "torchtitan") job.model.fused_loss = false;
  comm::ParallelDims dims;
  dims.pp = layout.pp;
  dims.dp_replicate = layout.dp_replicate;
  dims.dp_shard = layout.dp_shard;
  dims.cp = layout.cp;
  dims.tp = layout.tp;
  dims.ep = layout.ep;
  const bool cpu = device.cores > 0;
  // The estimate counts the CPU attention kernel's per-thread tiles for the threads a rank runs.
  const int threads_before = omp_get_max_threads();
  if (cpu && device.threads_per_rank > 0) omp_set_num_threads(device.threads_per_rank);
  train::MemoryBudget budget = train::job_memory_budget(job, model.config, dims, cpu ? Device::cpu() : Device::cuda(0));
  omp_set_num_threads(threads_before);
  budget.available_bytes = device.memory_bytes;
  budget.source = device.name + " memory";
  return budget;
}

namespace {

// The group a mesh dimension's collectives run on: `size` members `stride`
// ranks apart in the node-major mesh (pp, dp_replicate, dp_shard, cp, tp from
// outer to inner), and the nodes they span.
GroupPlacement mesh_group(int64_t size, int64_t stride, int64_t devices_per_node) {
  GroupPlacement group;
  group.size = size;
  const int64_t span = size * stride;  // ranks from the first member to past the last
  group.nodes = span <= devices_per_node ? 1 : std::min<int64_t>(size, span / std::max<int64_t>(1, devices_per_node));
  return group;
}

// One rank's two streams (compute, communication) as the simulation advances them.
struct Streams {
  double compute = 0.0, comm = 0.0;
};

struct PipelineCosts {
  // Per stage: forward, full backward (recomputation included), its input and
  // weight halves, and the parameters FSDP gathers and reduces for it.
  std::vector<double> forward, backward, backward_input, backward_weight, recompute;
  std::vector<double> gather_seconds, reduce_seconds, replicate_seconds;
  double send_seconds = 0.0;
};

class StepSimulation {
 public:
  StepSimulation(const ModelUnderPlan& model, const PlanRequest& request, const Layout& layout,
                 const DeviceProfile& device, std::vector<TimelineEvent>* timeline)
      : model_(model),
        request_(request),
        layout_(layout),
        device_(device),
        timeline_(timeline),
        costs_(model, request, layout, device) {
    const int64_t dpn = std::max<int64_t>(1, request.devices_per_node);
    const int64_t tp = layout.tp, cp = layout.cp;
    fsdp_group_ = mesh_group(layout.dp_shard * cp, tp, dpn);
    replicate_group_ = mesh_group(layout.dp_replicate, layout.dp_shard * cp * tp, dpn);
    tp_group_ = mesh_group(tp, 1, dpn);
    cp_group_ = mesh_group(cp, tp, dpn);
    ep_group_ = mesh_group(layout.ep, tp * (layout.dp_shard * cp / std::max<int64_t>(1, layout.ep)), dpn);
    expert_fsdp_group_ = mesh_group(layout.dp_shard * cp / std::max<int64_t>(1, layout.ep), tp, dpn);
    pp_group_ = mesh_group(2, layout.dp_replicate * layout.dp_shard * cp * tp, dpn);
  }

  StepPrediction run() {
    StepPrediction prediction;
    prediction.layout = layout_;
    if (layout_.pp > 1) {
      simulate_pipeline(prediction);
    } else {
      simulate_flat();
    }
    add_optimizer(prediction);
    finish(prediction);
    return prediction;
  }

 private:
  void event(int rank, int stream, std::string name, std::string category, double start, double seconds) {
    if (timeline_ == nullptr || seconds <= 0) return;
    timeline_->push_back(TimelineEvent{rank, stream, std::move(name), std::move(category), start, seconds});
  }

  CommCost& comm(const std::string& kind, bool cross_node) {
    for (CommCost& cost : comm_) {
      if (cost.kind == kind && cost.cross_node == cross_node) return cost;
    }
    comm_.push_back(CommCost{kind, cross_node, 0, 0.0, 0.0, 0.0});
    return comm_.back();
  }

  // A collective on the communication stream, issued no earlier than `ready`; its end.
  double overlapped(Streams& streams, int rank, const std::string& kind, Collective collective, double bytes,
                    const GroupPlacement& group, double ready, const std::string& what) {
    if (group.size <= 1 || bytes <= 0) return ready;
    const CollectiveCost cost = collective_cost(collective, bytes, group, device_);
    CommCost& total = comm(kind, cost.cross_node);
    // On the CPU a collective issued beside compute on cores that are all
    // busy also waits for the scheduler, its worker and its peers' (a
    // pipeline's send/recv bypasses the worker).
    const bool contended = device_.cores > 0 && collective != Collective::send_recv;
    const double seconds = contended ? std::max(cost.seconds, cost.seconds - device_.collective_overhead_seconds +
                                                                  device_.contended_collective_seconds)
                                     : cost.seconds;
    total.calls += 1;
    total.bytes += bytes;
    total.busy_seconds += seconds;
    if (device_.cores > 0) {
      // On the CPU the collective's worker polls MPI on the cores the rank
      // computes with (tests/plan: measured busy time tracks the sum, not the
      // overlap), so it overlaps nothing: it runs in line.
      const double start = std::max({streams.comm, ready, streams.compute});
      streams.comm = streams.compute = start + seconds;
      total.exposed_seconds += seconds;
      if (timeline_ != nullptr) event(rank, 0, kind + " " + what, "comm", start, seconds);
      return streams.comm;
    }
    const double start = std::max(streams.comm, ready);
    streams.comm = start + cost.seconds;
    if (timeline_ != nullptr) event(rank, 1, kind + " " + what, "comm", start, cost.seconds);
    return streams.comm;
  }

  // The compute stream waits for `until`; the wait is exposed communication of `kind`.
  void wait_for(Streams& streams, int rank, const std::string& kind, bool cross_node, double until) {
    if (until <= streams.compute) return;
    comm(kind, cross_node).exposed_seconds += until - streams.compute;
    if (timeline_ != nullptr) event(rank, 0, "wait " + kind, "comm", streams.compute, until - streams.compute);
    streams.compute = until;
  }

  // Compute on the compute stream, with the in-line collectives of the unit
  // (tensor parallelism, expert all-to-all, context parallelism) inside it.
  // (`unit` and `phase` name the event: "layers.3" "forward".)
  void compute(Streams& streams, int rank, const UnitPass& pass, const std::string& unit, const char* phase,
               const std::string& category) {
    double seconds = pass.compute_seconds;
    if (timeline_ != nullptr) event(rank, 0, unit + " " + phase, category, streams.compute, seconds);
    streams.compute += seconds;
    compute_seconds_[rank] += seconds;
    if (category == "recompute") recompute_seconds_[rank] += seconds;
    for (const InlineCollective& inline_collective : pass.collectives) {
      const CollectiveCost cost = collective_cost(inline_collective.collective, inline_collective.bytes,
                                                  group_of(inline_collective.kind), device_);
      // Ring attention's passes run under the attention kernel: only what outlasts it is exposed.
      const double exposed =
          inline_collective.hidden_under_seconds > 0
              ? std::max(0.0, cost.seconds * inline_collective.calls - inline_collective.hidden_under_seconds)
              : cost.seconds * inline_collective.calls;
      CommCost& total = comm(inline_collective.kind, cost.cross_node);
      total.calls += inline_collective.calls;
      total.bytes += inline_collective.bytes * inline_collective.calls;
      total.busy_seconds += cost.seconds * inline_collective.calls;
      total.exposed_seconds += exposed;
      if (timeline_ != nullptr) event(rank, 0, inline_collective.kind + " " + unit, "comm", streams.compute, exposed);
      streams.compute += exposed;
    }
  }

  const GroupPlacement& group_of(const std::string& kind) const {
    if (kind == "tp") return tp_group_;
    if (kind == "ep_all_to_all") return ep_group_;
    if (kind == "cp_ring" || kind == "cp_all_gather" || kind == "cp_reduce_scatter") return cp_group_;
    return fsdp_group_;
  }

  // One piece of a flat (unpipelined) step: a unit's forward or backward,
  // the FSDP gather it needs first (0: none), the reduction behind it.
  struct FlatPiece {
    size_t unit = 0;
    bool backward = false;
    double gather_bytes = 0.0, reduce_bytes = 0.0;
    std::string gather_name;
    double expert_gather_bytes = 0.0, expert_reduce_bytes = 0.0;
  };

  // titan's FSDP units (parallel/fsdp.cpp): each block, and the root (the
  // embeddings, final norm and output together), which is gathered before the
  // forward and again at the start of the backward; every unit but the last
  // block is resharded after its forward and gathered again for its backward.
  std::vector<FlatPiece> flat_pieces() const {
    const std::vector<UnitCost>& units = costs_.units();
    double root_gather = 0.0, root_reduce = 0.0;
    size_t last_block = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      if (is_block(units[u].name)) {
        last_block = u;
      } else {
        root_gather += units[u].gather_bytes;
        root_reduce += units[u].reduce_bytes;
      }
    }
    std::vector<FlatPiece> pieces;
    bool root_gathered = false;
    for (size_t u = 0; u < units.size(); ++u) {
      FlatPiece piece{u, false, 0.0, 0.0, units[u].name};
      if (is_block(units[u].name)) {
        piece.gather_bytes = units[u].gather_bytes;
        piece.expert_gather_bytes = units[u].expert_gather_bytes;
      } else if (!root_gathered) {
        piece.gather_bytes = root_gather;
        piece.gather_name = "root";
        root_gathered = true;
      }
      pieces.push_back(piece);
    }
    root_gathered = false;
    for (size_t k = units.size(); k-- > 0;) {
      FlatPiece piece{k, true, 0.0, 0.0, units[k].name};
      if (is_block(units[k].name)) {
        piece.gather_bytes = k == last_block ? 0.0 : units[k].gather_bytes;
        piece.expert_gather_bytes = k == last_block ? 0.0 : units[k].expert_gather_bytes;
        piece.reduce_bytes = units[k].reduce_bytes;
        piece.expert_reduce_bytes = units[k].expert_reduce_bytes;
      } else if (!root_gathered) {
        piece.gather_bytes = root_gather;
        piece.gather_name = "root";
        root_gathered = true;
      }
      pieces.push_back(piece);
    }
    pieces.back().reduce_bytes += root_reduce;  // the root's gradients are complete after the embeddings' backward
    return pieces;
  }

  static bool is_block(const std::string& name) {
    return name.rfind("layers.", 0) == 0 || name.rfind("mtp_layers.", 0) == 0;
  }

  // No pipeline: every rank runs the same units; rank 0 stands for all. FSDP
  // gathers the next unit that needs it while one computes and
  // reduce-scatters each unit's gradients behind its backward.
  void simulate_flat() {
    Streams streams;
    const std::vector<UnitCost>& units = costs_.units();
    const std::vector<FlatPiece> pieces = flat_pieces();
    const bool fsdp = fsdp_group_.size > 1;
    for (int64_t micro = 0; micro < layout_.gradient_accumulation; ++micro) {
      std::vector<double> gathered(pieces.size(), -1.0);  // when each piece's gather lands (-1: not issued)
      auto issue = [&](size_t k) {
        if (!fsdp || k >= pieces.size() || gathered[k] >= 0 || pieces[k].gather_bytes <= 0) return;
        gathered[k] = gather(streams, 0, pieces[k].gather_bytes, pieces[k].expert_gather_bytes, pieces[k].gather_name);
      };
      for (size_t k = 0; k < pieces.size(); ++k) {
        issue(k);
        // Prefetch: the next piece that gathers, issued as this one starts.
        for (size_t next = k + 1; next < pieces.size(); ++next) {
          if (pieces[next].gather_bytes > 0) {
            issue(next);
            break;
          }
        }
        if (gathered[k] >= 0) wait_for(streams, 0, "fsdp_all_gather", fsdp_group_.nodes > 1, gathered[k]);
        const UnitCost& unit = units[pieces[k].unit];
        if (!pieces[k].backward) {
          compute(streams, 0, unit.forward, unit.name, "forward", "compute");
          continue;
        }
        if (unit.recompute.compute_seconds > 0)
          compute(streams, 0, unit.recompute, unit.name, "recompute", "recompute");
        compute(streams, 0, unit.backward, unit.name, "backward", "compute");
        if (pieces[k].reduce_bytes > 0) {
          reduce(streams, 0, pieces[k].reduce_bytes, pieces[k].expert_reduce_bytes, unit.name);
        }
      }
    }
    // The step ends when the last reduction lands.
    wait_for(streams, 0, fsdp ? "fsdp_reduce_scatter" : "dp_all_reduce",
             (fsdp ? fsdp_group_ : replicate_group_).nodes > 1, streams.comm);
    end_seconds_ = streams.compute;
  }

  // A unit's gradient reduction behind its backward: reduce-scatter over the
  // FSDP group, then (HSDP, DDP) an all-reduce of the shard across replicas.
  void reduce(Streams& streams, int rank, double reduce_bytes, double expert_reduce_bytes, const std::string& name) {
    double end = overlapped(streams, rank, "fsdp_reduce_scatter", Collective::reduce_scatter, reduce_bytes, fsdp_group_,
                            streams.compute, name);
    end = overlapped(streams, rank, "fsdp_reduce_scatter", Collective::reduce_scatter, expert_reduce_bytes,
                     expert_fsdp_group_, end, name + " experts");
    const double shards = reduce_bytes / static_cast<double>(std::max<int64_t>(1, fsdp_group_.size)) +
                          expert_reduce_bytes / static_cast<double>(std::max<int64_t>(1, expert_fsdp_group_.size));
    overlapped(streams, rank, "dp_all_reduce", Collective::all_reduce, shards, replicate_group_, end, name);
  }

  // A unit's FSDP gather: its dense parameters, then its experts' over their group; when both have landed.
  double gather(Streams& streams, int rank, double bytes, double expert_bytes, const std::string& name) {
    const double end =
        overlapped(streams, rank, "fsdp_all_gather", Collective::all_gather, bytes, fsdp_group_, streams.compute, name);
    return std::max(end, overlapped(streams, rank, "fsdp_all_gather", Collective::all_gather, expert_bytes,
                                    expert_fsdp_group_, streams.compute, name + " experts"));
  }

  // Pipeline: each rank runs its schedule's actions; a receive waits for its
  // send to arrive. Stages keep their units gathered all step (titan's default
  // under pipelining): one gather before a stage's first forward, one
  // reduction after its last backward.
  void simulate_pipeline(StepPrediction& prediction) {
    using parallel::pipeline::Action;
    using parallel::pipeline::ActionType;
    const PipelineCostPlan plan = costs_.pipeline();
    const parallel::pipeline::Schedule& schedule = plan.schedule;
    const int ranks = schedule.ranks;
    std::vector<Streams> streams(static_cast<size_t>(ranks));
    std::vector<bool> gathered(static_cast<size_t>(schedule.stages), false);
    std::vector<int> backwards_left;
    bool last_pass = false;
    PipelineCallbacks callbacks;
    callbacks.compute = [&](int rank, const Action& action) {
      Streams& s = streams[static_cast<size_t>(rank)];
      const size_t stage = static_cast<size_t>(action.stage);
      const UnitCost& cost = plan.stages[stage];
      if (!gathered[stage] && fsdp_group_.size > 1) {
        const double end =
            gather(s, rank, cost.gather_bytes, cost.expert_gather_bytes, "stage " + std::to_string(stage));
        wait_for(s, rank, "fsdp_all_gather", fsdp_group_.nodes > 1, end);
      }
      gathered[stage] = true;
      const std::string what =
          timeline_ != nullptr ? "stage " + std::to_string(stage) + " mb " + std::to_string(action.microbatch) : "";
      const bool input_gradient = action.type == ActionType::full_backward || action.type == ActionType::backward_input;
      if (input_gradient && cost.recompute.compute_seconds > 0) {
        compute(s, rank, cost.recompute, what, "recompute", "recompute");
      }
      if (action.type == ActionType::forward) compute(s, rank, cost.forward, what, "forward", "compute");
      if (action.type == ActionType::full_backward) compute(s, rank, cost.backward, what, "backward", "compute");
      if (action.type == ActionType::backward_input) {
        compute(s, rank, cost.backward_input, what, "backward (input)", "compute");
      }
      if (action.type == ActionType::backward_weight) {
        compute(s, rank, cost.backward_weight, what, "backward (weight)", "compute");
      }
      const bool completes = action.type == ActionType::full_backward || action.type == ActionType::backward_weight;
      if (completes && --backwards_left[stage] == 0 && last_pass) {
        reduce(s, rank, cost.reduce_bytes, cost.expert_reduce_bytes, "stage " + std::to_string(stage));
      }
    };
    callbacks.send = [&](int rank, const Action& action) {
      Streams& s = streams[static_cast<size_t>(rank)];
      const double sent = s.compute;
      const double end = overlapped(s, rank, "pp_send_recv", Collective::send_recv, plan.send_bytes, pp_group_, sent,
                                    "stage " + std::to_string(action.stage));
      return std::make_pair(sent, end);
    };
    callbacks.receive = [&](int rank, const Action&, double sent, double arrives) {
      // Waiting for the previous stage to produce the message is bubble;
      // only its transfer, once sent, is exposed communication.
      Streams& s = streams[static_cast<size_t>(rank)];
      if (sent > s.compute) {
        event(rank, 0, "bubble", "bubble", s.compute, sent - s.compute);
        s.compute = sent;
      }
      wait_for(s, rank, "pp_send_recv", pp_group_.nodes > 1, arrives);
    };
    // Gradient accumulation runs the schedule once per accumulated batch; the
    // gradients are reduced after the last one.
    for (int64_t pass = 0; pass < layout_.gradient_accumulation; ++pass) {
      last_pass = pass + 1 == layout_.gradient_accumulation;
      backwards_left.assign(static_cast<size_t>(schedule.stages), schedule.microbatches);
      run_schedule(schedule, callbacks);
    }
    for (int rank = 0; rank < ranks; ++rank) {
      Streams& s = streams[static_cast<size_t>(rank)];
      wait_for(s, rank, "fsdp_reduce_scatter", fsdp_group_.nodes > 1, s.comm);
    }
    // The slowest pipeline rank sets the step; its idle time inside it is the bubble.
    int slowest = 0;
    for (int rank = 1; rank < ranks; ++rank) {
      if (streams[static_cast<size_t>(rank)].compute > streams[static_cast<size_t>(slowest)].compute) slowest = rank;
    }
    end_seconds_ = streams[static_cast<size_t>(slowest)].compute;
    slowest_rank_ = slowest;
    double busiest = 0.0;
    for (const auto& [rank, seconds] : compute_seconds_) busiest = std::max(busiest, seconds);
    prediction.bubble_seconds = std::max(0.0, end_seconds_ - busiest - exposed_total());
  }

  double exposed_total() const {
    double total = 0.0;
    for (const CommCost& cost : comm_) total += cost.exposed_seconds;
    return total / std::max<int64_t>(1, layout_.pp);  // summed over pipeline ranks: per rank on average
  }

  void add_optimizer(StepPrediction& prediction) {
    prediction.optimizer_seconds = costs_.optimizer_seconds();
    event(slowest_rank_, 0, "optimizer", "optimizer", end_seconds_, prediction.optimizer_seconds);
  }

  void finish(StepPrediction& prediction) {
    prediction.step_seconds = end_seconds_ + prediction.optimizer_seconds + costs_.step_overhead_seconds();
    prediction.overhead_seconds = costs_.step_overhead_seconds();
    double busiest = 0.0, recompute = 0.0;
    for (const auto& [rank, seconds] : compute_seconds_) {
      if (seconds > busiest) {
        busiest = seconds;
        recompute = recompute_seconds_[rank];
      }
    }
    prediction.compute_seconds = busiest;
    prediction.recompute_seconds = recompute;
    // Exposed communication per rank (pipeline ranks averaged), by kind.
    const double ranks = static_cast<double>(std::max<int64_t>(1, layout_.pp));
    for (CommCost& cost : comm_) {
      cost.exposed_seconds /= ranks;
      cost.busy_seconds /= ranks;
      cost.bytes /= ranks;
      cost.calls = static_cast<int64_t>(std::llround(static_cast<double>(cost.calls) / ranks));
      prediction.exposed_comm_seconds += cost.exposed_seconds;
    }
    std::sort(comm_.begin(), comm_.end(),
              [](const CommCost& a, const CommCost& b) { return a.exposed_seconds > b.exposed_seconds; });
    prediction.comm = comm_;
    const double tokens =
        static_cast<double>(layout_.dp() * layout_.local_batch_size * layout_.gradient_accumulation * request_.seq_len);
    prediction.tokens_per_second_per_device = tokens / prediction.step_seconds / static_cast<double>(layout_.devices());
    // MFU against the dense bf16 (or f32) peak, as TorchTitan reports it, float8 or not.
    const double peak = device_.peak_flops(request_.compute_dtype == DType::bf16 ? DType::bf16 : DType::f32);
    prediction.mfu = peak > 0 ? model_.flops_per_token * prediction.tokens_per_second_per_device / peak : 0.0;
  }

  const ModelUnderPlan& model_;
  const PlanRequest& request_;
  const Layout& layout_;
  const DeviceProfile& device_;
  std::vector<TimelineEvent>* timeline_;
  LayoutCosts costs_;
  GroupPlacement fsdp_group_, replicate_group_, tp_group_, cp_group_, ep_group_, pp_group_, expert_fsdp_group_;
  std::vector<CommCost> comm_;
  std::map<int, double> compute_seconds_, recompute_seconds_;
  double end_seconds_ = 0.0;
  int slowest_rank_ = 0;
};

}  // namespace

StepPrediction predict_step_time(const ModelUnderPlan& model, const PlanRequest& request, const Layout& layout,
                                 const DeviceProfile& device, std::vector<TimelineEvent>* timeline) {
  return StepSimulation(model, request, layout, device, timeline).run();
}

void add_memory(StepPrediction& prediction, const ModelUnderPlan& model, const PlanRequest& request,
                const DeviceProfile& device) {
  const train::MemoryBudget memory = predict_memory(model, request, prediction.layout, device);
  prediction.memory_bytes = memory.needed_bytes;
  prediction.memory_capacity_bytes = device.memory_bytes;
  prediction.memory_breakdown = memory.breakdown;
  prediction.fits = memory.needed_bytes <= train::MemoryBudget::kUsableFraction * device.memory_bytes;
}

StepPrediction predict_step(const ModelUnderPlan& model, const PlanRequest& request, const Layout& layout,
                            const DeviceProfile& device, std::vector<TimelineEvent>* timeline) {
  StepPrediction prediction = predict_step_time(model, request, layout, device, timeline);
  add_memory(prediction, model, request, device);
  return prediction;
}

}  // namespace titan::plan
