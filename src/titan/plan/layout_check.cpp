#include "titan/plan/layout_check.h"

#include <algorithm>

#include "titan/core/error.h"
#include "titan/parallel/pipeline_schedule.h"

namespace titan::plan {
namespace {

// Where the trainer's mesh puts a rank: nodes filled in order, devices_per_node each.
bool layout_tp_within_nodes(int64_t devices, int64_t devices_per_node, int64_t tp) {
  // comm/device_mesh.cpp (the tensor-parallel loop in DeviceMesh's constructor):
  // a group of tp consecutive mesh positions must not cross a node boundary.
  // On one node nothing crosses; on several, a tp that does not divide the node
  // puts positions devices_per_node - 1 and devices_per_node in one group.
  return devices <= devices_per_node || devices_per_node % tp == 0;
}

bool layout_has_moe(const models::DecoderConfig& config) {
  return std::any_of(config.layers.begin(), config.layers.end(),
                     [](const auto& layer) { return layer.moe.has_value(); });
}

}  // namespace

std::string layout_degrees_refusal(const Layout& layout, const PlanRequest& request,
                                   const models::DecoderConfig& config) {
  const Layout& l = layout;
  // comm/device_mesh.cpp:52-63 (ParallelDims::resolved).
  if (l.pp < 1 || l.dp_replicate < 1 || l.dp_shard < 1 || l.cp < 1 || l.tp < 1 || l.ep < 1) {
    return "every degree must be >= 1";
  }
  if (l.devices() != request.devices) {
    return fmt::format("the degrees' product {} is not the {} devices", l.devices(), request.devices);
  }
  if (l.dp_shard % l.ep != 0) {
    return fmt::format("ep {} does not divide dp_shard {} (expert parallelism borrows the FSDP shards)", l.ep,
                       l.dp_shard);
  }
  // comm/device_mesh.cpp:170 (tensor parallelism within a node).
  if (!layout_tp_within_nodes(request.devices, request.devices_per_node, l.tp)) {
    return fmt::format("tp {} would span nodes of {} devices", l.tp, request.devices_per_node);
  }
  // models/parallelize_decoder.cpp:347: multi-token prediction with pp, cp or tp is not built.
  if (!config.mtp_layers.empty() && (l.pp > 1 || l.cp > 1 || l.tp > 1)) {
    return "multi-token prediction trains with FSDP and expert parallelism only";
  }
  // models/parallelize_decoder.cpp:265 and parallel/expert_parallel.cpp:60.
  if (l.ep > 1) {
    if (!layout_has_moe(config)) return fmt::format("ep {}: the model has no mixture-of-experts layers", l.ep);
    for (const nn::TransformerBlockConfig& layer : config.layers) {
      if (layer.moe && layer.moe->num_experts % l.ep != 0) {
        return fmt::format("ep {} does not divide the {} experts", l.ep, layer.moe->num_experts);
      }
    }
  }
  if (l.tp > 1) {
    for (const nn::TransformerBlockConfig& layer : config.layers) {
      // models/parallelize_decoder.cpp:93 (attention), :118 (latent attention), :136 (Gated DeltaNet).
      if (layer.delta_net) {
        if (layer.delta_net->n_key_heads % l.tp != 0) {
          return fmt::format("tp {} does not divide the {} linear-attention key heads", l.tp,
                             layer.delta_net->n_key_heads);
        }
      } else if (layer.mla) {
        if (layer.attention.n_heads % l.tp != 0) {
          return fmt::format("tp {} does not divide the {} heads", l.tp, layer.attention.n_heads);
        }
      } else if (layer.attention.n_heads % l.tp != 0 || layer.attention.kv_heads() % l.tp != 0) {
        return fmt::format("tp {} does not divide the {} query / {} key-value heads", l.tp, layer.attention.n_heads,
                           layer.attention.kv_heads());
      }
      // models/parallelize_decoder.cpp:154: the dense FFN splits (experts do not: ep splits them).
      if (!layer.moe && layer.feed_forward.hidden_dim % l.tp != 0) {
        return fmt::format("tp {} does not divide the FFN width {}", l.tp, layer.feed_forward.hidden_dim);
      }
    }
    // models/parallelize_decoder.cpp:168 and :328: the vocabulary-parallel output and embedding.
    if (config.vocab_size % l.tp != 0) {
      return fmt::format("tp {} does not divide the vocabulary {}", l.tp, config.vocab_size);
    }
  }
  if (l.cp > 1) {
    // train/config_loader.cpp:770: 2 x cp equal chunks (the head-tail load balance).
    if (request.seq_len % (2 * l.cp) != 0) {
      return fmt::format("seq_len {} is not a multiple of 2 x cp {}", request.seq_len, l.cp);
    }
    // models/parallelize_decoder.cpp:281: no ring for the Gated DeltaNet recurrence.
    for (const nn::TransformerBlockConfig& layer : config.layers) {
      if (layer.delta_net) return "context parallelism over linear-attention layers is not built";
    }
  }
  // parallel/tensor_parallel.cpp:145 (at the first forward): sequence
  // parallelism splits each rank's tokens, seq_len / cp of them, over tp.
  if (l.tp > 1 && (request.seq_len % l.cp != 0 || (request.seq_len / l.cp) % l.tp != 0)) {
    return fmt::format("seq_len {} / cp {} does not split over tp {} (sequence parallelism)", request.seq_len, l.cp,
                       l.tp);
  }
  if (l.pp > 1) {
    // train/pipeline_plan.cpp:83: the auxiliary loss spans every stage.
    for (const nn::TransformerBlockConfig& layer : config.layers) {
      if (layer.moe && layer.moe->aux_loss_coef != 0.0) {
        return "pipeline parallelism with an MoE auxiliary loss (moe_aux_loss_coef != 0) is refused";
      }
    }
  }
  return {};
}

std::string layout_pipeline_refusal(const Layout& layout, const models::DecoderConfig& config) {
  const Layout& l = layout;
  if (l.pp == 1) return {};
  namespace pipeline = parallel::pipeline;
  const std::vector<std::string> names = pipeline::schedule_names();
  if (std::find(names.begin(), names.end(), l.pipeline_schedule) == names.end()) {
    return fmt::format("unknown pipeline schedule '{}'", l.pipeline_schedule);
  }
  // parallel/pipeline_schedule.cpp:345 (stages_per_rank) and train/pipeline_plan.cpp:60: with
  // pipeline_parallel_layers_per_stage unset (what apply_layout writes), a rank
  // holds the schedule's default number of stages: 1, or 2 for the interleaved
  // schedules and the V.
  if (l.stages_per_rank != pipeline::stages_per_rank(l.pipeline_schedule)) {
    return fmt::format("{} runs {} stages per rank, not {}", l.pipeline_schedule,
                       pipeline::stages_per_rank(l.pipeline_schedule), l.stages_per_rank);
  }
  const int64_t stages = l.pp * l.stages_per_rank;
  // models/model_parts.cpp:29-38 (split_module_fqns, with the default
  // first/last_stage_less_layers): every stage gets a layer or the embedding / head.
  const train::ParallelismSection defaults;
  const int64_t first_less = defaults.pipeline_parallel_first_stage_less_layers;
  const int64_t last_less = defaults.pipeline_parallel_last_stage_less_layers;
  const int64_t effective = config.n_layers() + first_less + last_less;
  if (stages > effective || first_less > effective / stages || last_less > effective / stages) {
    return fmt::format("{} stages for {} layers", stages, config.n_layers());
  }
  // train/config_loader.cpp:758.
  if (l.microbatch_size < 1 || l.local_batch_size % l.microbatch_size != 0) {
    return fmt::format("micro-batch {} does not divide the local batch {}", l.microbatch_size, l.local_batch_size);
  }
  const int64_t microbatches = l.local_batch_size / l.microbatch_size;
  // parallel/pipeline_schedule.cpp:334 (check_schedule_size).
  if (stages > 1024 || microbatches > 65536 || stages * microbatches > (int64_t{1} << 20)) {
    return fmt::format("{} stages x {} micro-batches is more than a schedule holds", stages, microbatches);
  }
  // train/pipeline_runner.cpp:40: 5 message kinds x stages x micro-batches within MPI's 32767 tags.
  if (5 * stages * microbatches > 32767) {
    return fmt::format("{} stages x {} micro-batches need more MPI tags than guaranteed", stages, microbatches);
  }
  // parallel/pipeline_schedule.cpp:391: Interleaved1F1B runs equal rounds of micro-batches.
  if (l.pipeline_schedule == "Interleaved1F1B") {
    const int64_t rounds = std::max<int64_t>(1, microbatches / l.pp);
    if (microbatches % rounds != 0) {
      return fmt::format("Interleaved1F1B: {} micro-batches do not split into {} rounds", microbatches, rounds);
    }
  }
  // train/pipeline_plan.cpp:76: tied embeddings need the first and last stage on one rank (only the V does that).
  if (config.tie_embeddings && l.pipeline_schedule != "ZBVZeroBubble") {
    return fmt::format("{} puts the tied embedding and output on different ranks", l.pipeline_schedule);
  }
  return {};
}

std::string layout_batch_refusal(const Layout& layout, const PlanRequest& request) {
  const Layout& l = layout;
  if (l.local_batch_size < 1 || l.gradient_accumulation < 1) return "the batch sizes must be >= 1";
  // train/config_loader.cpp:640: at most 2^31 tokens per micro-batch.
  if (request.seq_len > (int64_t{1} << 31) / l.local_batch_size) {
    return fmt::format("local batch {} x seq_len {} is more than 2^31 tokens", l.local_batch_size, request.seq_len);
  }
  return {};
}

std::string layout_refusal(const Layout& layout, const PlanRequest& request, const models::DecoderConfig& config) {
  std::string why = layout_degrees_refusal(layout, request, config);
  if (why.empty()) why = layout_pipeline_refusal(layout, config);
  if (why.empty()) why = layout_batch_refusal(layout, request);
  return why;
}

}  // namespace titan::plan
