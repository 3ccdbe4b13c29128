#include "titan/plan/unit_work.h"

#include <algorithm>
#include <cmath>

#include "titan/core/error.h"
#include "titan/nn/module.h"
#include "titan/train/pipeline_plan.h"

namespace titan::plan {

UnitPass& UnitPass::operator+=(const UnitPass& other) {
  compute_seconds += other.compute_seconds;
  collectives.insert(collectives.end(), other.collectives.begin(), other.collectives.end());
  return *this;
}

std::vector<UnitParameters> count_unit_parameters(const models::ModelSpec& spec, const models::DecoderConfig& config) {
  const std::shared_ptr<models::Decoder> model = spec.build(config, Device::meta());
  std::vector<UnitParameters> units;
  for (const std::string& fqn : spec.module_fqns(config)) units.push_back(UnitParameters{fqn, 0.0, 0.0, 0.0});
  for (auto& [name, parameter] : model->named_parameters()) {
    const double count = static_cast<double>(parameter->data.numel());
    // The longest module name the parameter sits under ("layers.1" must not take "layers.10.").
    UnitParameters* owner = nullptr;
    for (UnitParameters& unit : units) {
      if (name.rfind(unit.name + ".", 0) == 0 && (owner == nullptr || unit.name.size() > owner->name.size())) {
        owner = &unit;
      }
    }
    if (owner == nullptr) continue;  // buffers outside the units (none today)
    if (name.find(".moe.experts.") != std::string::npos) {
      owner->experts += count;
    } else {
      owner->dense += count;
      if (name.find(".attention.") != std::string::npos) owner->attention += count;
    }
  }
  return units;
}

namespace {

// Elementwise traffic per token of one block's forward, in elements: the two
// pre-norms (read, write), two residual adds (two reads, a write), RoPE on
// queries and keys, the attention output, and the FFN's activation (two
// reads, a write of the hidden width). Backward moves about twice as much.
double block_elementwise_elements(double dim, double attention_width, double ffn_width) {
  return 2 * 2 * dim + 2 * 3 * dim + 2 * attention_width + 3 * ffn_width + dim;
}

// Kernels a block's forward launches (norms, projections, RoPE, attention,
// activation, residuals and the casts around them); MoE adds routing, sorting
// and the grouped GEMMs.
constexpr double kBlockForwardOps = 24.0;
constexpr double kMoeForwardOps = 14.0;

}  // namespace

LayoutCosts::LayoutCosts(const ModelUnderPlan& model, const PlanRequest& request, const Layout& layout,
                         const DeviceProfile& device)
    : model_(model), request_(request), layout_(layout), device_(device) {
  sequences_ = static_cast<double>(layout.pp > 1 ? layout.microbatch_size : layout.local_batch_size);
  tokens_ = sequences_ * static_cast<double>(request.seq_len) / static_cast<double>(layout.cp);
  element_bytes_ = static_cast<double>(dtype_size(request.compute_dtype));
  if (device.cores > 0) {
    const double threads = static_cast<double>(std::max(1, device.threads_per_rank));
    share_ = std::min(1.0, static_cast<double>(device.cores) /
                               (static_cast<double>(std::max<int64_t>(1, request.devices_per_node)) * threads));
  }
  size_t layer = 0, mtp = 0;
  for (const UnitParameters& unit : model.units) {
    if (unit.name.rfind("layers.", 0) == 0) {
      units_.push_back(block_cost(unit, model.config.layers.at(layer++)));
    } else if (unit.name.rfind("mtp_layers.", 0) == 0) {
      units_.push_back(block_cost(unit, model.config.mtp_layers.at(mtp++)));
    } else if (unit.name == "tok_embeddings") {
      units_.push_back(embedding_cost(unit));
    } else if (unit.name == "output") {
      units_.push_back(output_cost(unit));
    } else {
      units_.push_back(norm_cost(unit));
    }
  }
}

double LayoutCosts::gemm(double m, double n, double k) const {
  if (m <= 0 || n <= 0 || k <= 0) return 0.0;
  double seconds = gemm_seconds(device_, m, n, k, request_.compute_dtype);
  if (request_.float8 && device_.fp8_flops > 0 && device_.bf16_flops > 0) {
    // float8 linears (tensorwise scaling): the product at the fp8 peak, after
    // an amax pass and a cast of each operand (read bf16 twice, write fp8).
    seconds = seconds * device_.bf16_flops / device_.fp8_flops + memory_seconds((m * k + k * n) * 5.0);
  }
  return seconds / share_;
}

// Eager PyTorch runs TorchTitan's elementwise chains op by op, upcasting to
// f32 (its RMSNorm: cast, square, mean, rsqrt, two multiplies; RoPE through
// complex views; SiLU then the product): about four times the traffic of one
// pass per op. Compiled (torch.compile per block), they fuse to about one pass.
constexpr double kEagerElementwiseTraffic = 4.0;
// FlashAttention-2, which SDPA runs on Hopper, reaches ~35% of H100's bf16
// peak over forward and backward with causal masks (FlashAttention-3 paper,
// Shah et al. 2024, its FA2 baseline).
constexpr double kFlashAttention2Efficiency = 0.35;

double LayoutCosts::memory_seconds(double bytes) const {
  const double bandwidth = device_.memory_bytes_per_second * device_.memory_efficiency * share_;
  const double traffic = request_.software == "torchtitan" && !request_.compile ? kEagerElementwiseTraffic : 1.0;
  return bandwidth > 0 ? bytes * traffic / bandwidth : 0.0;
}

// Host dispatch: the CPU pays each op in line; an accelerator's host runs
// ahead and only shows when its launches take longer than the kernels.
double LayoutCosts::ops_seconds(double ops, double device_seconds) const {
  const double host = ops * device_.op_overhead_seconds * (request_.compile ? 0.5 : 1.0);
  return device_.overhead_in_line ? device_seconds + host : std::max(device_seconds, host);
}

void LayoutCosts::set_fsdp_bytes(UnitCost& cost, const UnitParameters& unit) const {
  const double tp = static_cast<double>(layout_.tp), ep = static_cast<double>(layout_.ep);
  cost.parameters = unit.dense / tp + unit.experts / ep;
  cost.gather_bytes = unit.dense / tp * element_bytes_;
  cost.reduce_bytes = unit.dense / tp * 4.0;  // mixed_precision_reduce = f32
  cost.expert_gather_bytes = unit.experts / ep * element_bytes_;
  cost.expert_reduce_bytes = unit.experts / ep * 4.0;
}

UnitCost LayoutCosts::block_cost(const UnitParameters& unit, const nn::TransformerBlockConfig& block) const {
  UnitCost cost;
  cost.name = unit.name;
  set_fsdp_bytes(cost, unit);
  const double tp = static_cast<double>(layout_.tp), cp = static_cast<double>(layout_.cp);
  const double T = tokens_, dim = static_cast<double>(block.attention.dim);
  const double seq = static_cast<double>(request_.seq_len);

  // Projections: attention's as four GEMMs of its average width, the dense FFN's as three.
  const double attention_width = unit.attention / dim / tp;  // summed output columns of its projections
  double forward_gemm = 4.0 * gemm(T, attention_width / 4.0, dim);
  double ffn_width = 0.0;
  double ops = kBlockForwardOps;
  if (block.moe) {
    const nn::MoEConfig& moe = *block.moe;
    const double experts = static_cast<double>(moe.num_experts), top_k = static_cast<double>(moe.top_k);
    const double hidden = static_cast<double>(moe.hidden_dim), ep = static_cast<double>(layout_.ep);
    // Each rank runs experts / ep experts on the tokens routed to them from its ep group (T x top_k on average).
    const double local_experts = experts / ep, tokens_per_expert = T * top_k * ep / experts;
    forward_gemm += gemm(T, experts, dim) + local_experts * 3.0 * gemm(tokens_per_expert, hidden, dim);
    const double shared = (unit.dense - unit.attention) / dim / 3.0;  // shared experts' width (router negligible)
    if (moe.num_shared_experts > 0) forward_gemm += 3.0 * gemm(T, shared, dim);
    ffn_width = top_k * hidden + (moe.num_shared_experts > 0 ? shared : 0.0);
    ops += kMoeForwardOps;
  } else {
    const double hidden = static_cast<double>(block.feed_forward.hidden_dim) / tp;
    forward_gemm += 3.0 * gemm(T, hidden, dim);
    ffn_width = hidden;
  }

  // The attention kernel: causal, so a query sees half the keys on average
  // (context parallelism's head-tail split keeps that per rank).
  // `head_dim`: what the kernel's inner products reduce over (its efficiency depends on it).
  double attention_flops = 0.0, head_dim = 0.0;
  if (block.delta_net) {
    const nn::GatedDeltaNetConfig& d = *block.delta_net;
    attention_flops = 2.0 * 3.0 * static_cast<double>(d.n_value_heads * d.key_head_dim * d.value_head_dim) / tp * T;
    head_dim = static_cast<double>(d.key_head_dim);
  } else {
    const double keys =
        block.attention.sliding_window > 0 ? std::min(seq, static_cast<double>(block.attention.sliding_window)) : seq;
    head_dim =
        block.mla ? static_cast<double>(block.mla->qk_head_dim()) : static_cast<double>(block.attention.head_size());
    const double head_dims = block.mla ? head_dim + static_cast<double>(block.mla->v_head_dim) : 2.0 * head_dim;
    attention_flops = 2.0 * T * (keys / 2.0) * head_dims * static_cast<double>(block.attention.n_heads) / tp;
  }
  const double device_attention = plan::attention_efficiency(device_, head_dim);
  const double attention_efficiency =
      request_.software == "torchtitan" ? std::min(device_attention, kFlashAttention2Efficiency) : device_attention;
  const double attention_rate = device_.peak_flops(request_.compute_dtype) * attention_efficiency * share_;
  const double attention_forward = attention_rate > 0 ? attention_flops / attention_rate : 0.0;

  const double elementwise_bytes = block_elementwise_elements(dim, attention_width, ffn_width) * T * element_bytes_;
  const double memory_forward = memory_seconds(elementwise_bytes);

  const double forward_device = forward_gemm + attention_forward + memory_forward;
  cost.forward.compute_seconds = ops_seconds(ops, forward_device);
  cost.backward.compute_seconds =
      ops_seconds(2.0 * ops, 2.0 * forward_gemm + 2.5 * attention_forward + 2.0 * memory_forward);
  cost.backward_input.compute_seconds =
      ops_seconds(1.5 * ops, forward_gemm + 2.5 * attention_forward + 2.0 * memory_forward);
  cost.backward_weight.compute_seconds = ops_seconds(0.5 * ops, forward_gemm);

  // In-line collectives. Tensor parallelism with sequence parallelism: each
  // sublayer gathers its input's sequence and reduce-scatters its output.
  if (layout_.tp > 1) {
    const double bytes = T * dim * element_bytes_;
    for (UnitPass* pass : {&cost.forward, &cost.backward, &cost.backward_input}) {
      pass->collectives.push_back({"tp", Collective::all_gather, bytes, 2, 0.0});
      pass->collectives.push_back({"tp", Collective::reduce_scatter, bytes, 2, 0.0});
    }
  }
  if (layout_.ep > 1 && block.moe) {
    // Dispatch and combine each way; the forward first swaps the per-expert token counts.
    const double bytes = T * static_cast<double>(block.moe->top_k) * dim * element_bytes_;
    const double counts = static_cast<double>(block.moe->num_experts) * 8.0;
    cost.forward.collectives.push_back({"ep_all_to_all", Collective::all_to_all, counts, 1, 0.0});
    for (UnitPass* pass : {&cost.forward, &cost.backward, &cost.backward_input}) {
      pass->collectives.push_back({"ep_all_to_all", Collective::all_to_all, bytes, 2, 0.0});
    }
  }
  if (layout_.cp > 1 && !block.delta_net) {
    const double kv_heads =
        static_cast<double>(block.attention.n_kv_heads > 0 ? block.attention.n_kv_heads : block.attention.n_heads);
    const double kv_bytes = 2.0 * kv_heads * static_cast<double>(block.attention.head_size()) / tp * element_bytes_;
    if (request_.cp_rotate_method == "alltoall") {
      // A ring of cp - 1 passes of this rank's keys and values, under the kernel.
      const int64_t passes = layout_.cp - 1;
      cost.forward.collectives.push_back({"cp_ring", Collective::send_recv, T * kv_bytes, passes, attention_forward});
      for (UnitPass* pass : {&cost.backward, &cost.backward_input}) {
        pass->collectives.push_back(
            {"cp_ring", Collective::send_recv, T * kv_bytes, 2 * passes, 2.5 * attention_forward});
      }
    } else {
      // Every rank gathers the whole sequence's keys and values (a call
      // each) before the kernel, again in backward, and reduce-scatters their
      // f32 gradients after it.
      const double gathered = T * cp * kv_bytes / 2.0;
      cost.forward.collectives.push_back({"cp_all_gather", Collective::all_gather, gathered, 2, 0.0});
      for (UnitPass* pass : {&cost.backward, &cost.backward_input}) {
        pass->collectives.push_back({"cp_all_gather", Collective::all_gather, gathered, 2, 0.0});
        pass->collectives.push_back(
            {"cp_reduce_scatter", Collective::reduce_scatter, gathered * 4.0 / element_bytes_, 2, 0.0});
      }
    }
  }

  // Recomputation in backward: full replays the forward (its collectives
  // too); per-op selective replays what the policy does not keep: every
  // other projection and the elementwise work, not the attention kernel nor
  // the sequence-parallel reduce-scatters.
  if (layout_.activation_checkpoint == "full") {
    cost.recompute = cost.forward;
  } else if (layout_.activation_checkpoint == "selective") {
    cost.recompute.compute_seconds = ops_seconds(ops, 0.5 * forward_gemm + memory_forward);
    if (layout_.tp > 1)
      cost.recompute.collectives.push_back({"tp", Collective::all_gather, T * dim * element_bytes_, 2, 0.0});
  }
  return cost;
}

UnitCost LayoutCosts::embedding_cost(const UnitParameters& unit) const {
  UnitCost cost;
  cost.name = unit.name;
  set_fsdp_bytes(cost, unit);
  const double dim = static_cast<double>(model_.config.dim());
  const double bytes = tokens_ * dim * element_bytes_;
  cost.forward.compute_seconds = ops_seconds(3.0, memory_seconds(2.0 * bytes));
  cost.backward.compute_seconds = ops_seconds(4.0, memory_seconds(3.0 * bytes));
  cost.backward_input = {};
  cost.backward_weight = cost.backward;
  if (layout_.tp > 1) {
    // The vocabulary-split lookup is summed and scattered over the sequence.
    cost.forward.collectives.push_back({"tp", Collective::reduce_scatter, bytes, 1, 0.0});
    cost.backward.collectives.push_back({"tp", Collective::all_gather, bytes, 1, 0.0});
  }
  return cost;
}

UnitCost LayoutCosts::output_cost(const UnitParameters& unit) const {
  UnitCost cost;
  cost.name = unit.name;
  set_fsdp_bytes(cost, unit);
  const double dim = static_cast<double>(model_.config.dim());
  const double vocab = static_cast<double>(model_.config.vocab_size) / static_cast<double>(layout_.tp);
  const double forward_gemm = gemm(tokens_, vocab, dim);
  // The fused loss reads its logits chunk by chunk: softmax statistics
  // forward, the gradient backward, in f32. TorchTitan's cross-entropy
  // materialises them: bf16 logits, an f32 copy, log-softmax and its gradient
  // (memory_seconds then counts eager PyTorch's passes on top).
  const double loss_bytes = tokens_ * vocab * (request_.software == "torchtitan" ? 2.0 * 4.0 : 4.0);
  cost.forward.compute_seconds = ops_seconds(8.0, forward_gemm + memory_seconds(2.0 * loss_bytes));
  cost.backward.compute_seconds = ops_seconds(12.0, 2.0 * forward_gemm + memory_seconds(3.0 * loss_bytes));
  cost.backward_input.compute_seconds = ops_seconds(8.0, forward_gemm + memory_seconds(3.0 * loss_bytes));
  cost.backward_weight.compute_seconds = ops_seconds(4.0, forward_gemm);
  if (layout_.tp > 1) {
    const double bytes = tokens_ * dim * element_bytes_;
    cost.forward.collectives.push_back({"tp", Collective::all_gather, bytes, 1, 0.0});
    cost.backward.collectives.push_back({"tp", Collective::reduce_scatter, bytes, 1, 0.0});
    cost.backward_input.collectives = cost.backward.collectives;
  }
  return cost;
}

UnitCost LayoutCosts::norm_cost(const UnitParameters& unit) const {
  UnitCost cost;
  cost.name = unit.name;
  set_fsdp_bytes(cost, unit);
  const double bytes = tokens_ * static_cast<double>(model_.config.dim()) * element_bytes_;
  cost.forward.compute_seconds = ops_seconds(3.0, memory_seconds(2.0 * bytes));
  cost.backward.compute_seconds = ops_seconds(6.0, memory_seconds(4.0 * bytes));
  cost.backward_input = cost.backward;
  return cost;
}

PipelineCostPlan LayoutCosts::pipeline() const {
  train::JobConfig job;
  apply_layout(layout_, request_, job);
  PipelineCostPlan plan;
  const models::PipelinePlacement placement = train::plan_pipeline(job, *model_.spec, model_.config, 0);
  plan.schedule = placement.schedule;
  for (const std::vector<std::string>& part : placement.parts) {
    UnitCost stage;
    for (const std::string& module : part) {
      const auto found =
          std::find_if(units_.begin(), units_.end(), [&](const UnitCost& unit) { return unit.name == module; });
      TITAN_CHECK(found != units_.end(), "plan: pipeline stage module {} is not a unit of the model", module);
      stage.name += (stage.name.empty() ? "" : " ") + module;
      stage.forward += found->forward;
      stage.backward += found->backward;
      stage.backward_input += found->backward_input;
      stage.backward_weight += found->backward_weight;
      stage.recompute += found->recompute;
      stage.gather_bytes += found->gather_bytes;
      stage.reduce_bytes += found->reduce_bytes;
      stage.expert_gather_bytes += found->expert_gather_bytes;
      stage.expert_reduce_bytes += found->expert_reduce_bytes;
      stage.parameters += found->parameters;
    }
    plan.stages.push_back(std::move(stage));
  }
  plan.send_bytes = tokens_ * static_cast<double>(model_.config.dim()) * element_bytes_;
  return plan;
}

double LayoutCosts::optimizer_seconds() const {
  double parameters = 0.0;
  for (const UnitCost& unit : units_) parameters += unit.parameters;
  const double fsdp = static_cast<double>(layout_.dp_shard * layout_.cp);
  const double shard = parameters / fsdp / static_cast<double>(layout_.pp);
  // AdamW reads and writes the f32 weight and both moments and reads the
  // gradient; clipping reads it again and zeroing writes it: 36 bytes a parameter.
  const double tensors = 10.0 * static_cast<double>(units_.size()) / static_cast<double>(layout_.pp);
  const double bandwidth = device_.memory_bytes_per_second * device_.memory_efficiency * share_;
  return ops_seconds(8.0 * tensors, bandwidth > 0 ? 36.0 * shard / bandwidth : 0.0);
}

double LayoutCosts::step_overhead_seconds() const {
  // The CPU trainer's own work between steps (loader hand-off, metrics, the
  // gradient norm's reduction): on the order of a hundred small ops.
  return device_.overhead_in_line ? 100.0 * device_.op_overhead_seconds : 0.0;
}

}  // namespace titan::plan
