#include "titan/plan/layout.h"

#include <algorithm>

#include "titan/core/error.h"
#include "titan/models/model_spec.h"
#include "titan/parallel/pipeline_schedule.h"
#include "titan/plan/layout_check.h"
#include "titan/train/config_loader.h"

namespace titan::plan {
namespace {

std::vector<int64_t> layout_divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

// The sizes tried for a count that divides `total`: the powers of two that
// divide it and the whole. (A search space, not a rule: every divisor would
// be accepted, but neighbouring sizes cost nearly alike, and the powers of two
// keep 1,024 devices of a 126-layer model to a few tens of thousands of layouts.)
std::vector<int64_t> layout_batch_sizes(int64_t total) {
  std::vector<int64_t> sizes;
  for (int64_t size = 1; size <= total && total % size == 0; size *= 2) sizes.push_back(size);
  if (sizes.back() != total) sizes.push_back(total);
  return sizes;
}

bool layout_model_has_moe(const models::DecoderConfig& config) {
  return std::any_of(config.layers.begin(), config.layers.end(),
                     [](const auto& layer) { return layer.moe.has_value(); });
}

}  // namespace

std::string Layout::describe() const {
  std::vector<std::string> parts;
  if (dp_replicate > 1) parts.push_back(fmt::format("Replicate {}", dp_replicate));
  if (dp_shard > 1) parts.push_back(fmt::format("FSDP {}", dp_shard));
  if (cp > 1) parts.push_back(fmt::format("CP {}", cp));
  if (tp > 1) parts.push_back(fmt::format("TP {}", tp));
  if (pp > 1) {
    // A schedule's default stages per rank go unsaid (an unknown name has none).
    const std::vector<std::string> names = parallel::pipeline::schedule_names();
    const bool known = std::find(names.begin(), names.end(), pipeline_schedule) != names.end();
    parts.push_back(known && stages_per_rank == parallel::pipeline::stages_per_rank(pipeline_schedule)
                        ? fmt::format("PP {} ({})", pp, pipeline_schedule)
                        : fmt::format("PP {} ({}, {} stages per rank)", pp, pipeline_schedule, stages_per_rank));
  }
  if (ep > 1) parts.push_back(fmt::format("EP {}", ep));
  std::string text = parts.empty() ? "1 device" : fmt::format("{}", fmt::join(parts, " x "));
  text += fmt::format(", AC {}, batch {}", activation_checkpoint, local_batch_size);
  if (pp > 1) text += fmt::format(" (mb {})", microbatch_size);
  if (gradient_accumulation > 1) text += fmt::format(" x {} accumulated", gradient_accumulation);
  return text;
}

std::vector<Layout> enumerate_layouts(const PlanRequest& request, const models::DecoderConfig& config) {
  TITAN_CHECK(request.devices >= 1, "plan: --devices must be >= 1, got {}", request.devices);
  TITAN_CHECK(request.devices_per_node >= 1, "plan: --devices-per-node must be >= 1, got {}", request.devices_per_node);
  TITAN_CHECK(request.seq_len >= 1, "plan: --seq-len must be >= 1, got {}", request.seq_len);
  TITAN_CHECK(request.global_batch_tokens >= 0 && request.global_batch_tokens % request.seq_len == 0,
              "plan: --global-batch-tokens {} must be a multiple of --seq-len {} (whole sequences; 0: one sequence "
              "per data-parallel rank)",
              request.global_batch_tokens, request.seq_len);
  const std::vector<std::string> known_schedules = parallel::pipeline::schedule_names();
  const std::vector<std::string> schedules = request.schedules.empty() ? known_schedules : request.schedules;
  for (const std::string& schedule : schedules) {
    TITAN_CHECK(std::find(known_schedules.begin(), known_schedules.end(), schedule) != known_schedules.end(),
                "plan: pipeline schedule '{}' is not one of {}", schedule, fmt::join(known_schedules, ", "));
  }
  const std::vector<std::string> known_modes{"none", "selective", "full"};
  const std::vector<std::string> modes = request.activation_modes.empty() ? known_modes : request.activation_modes;
  for (const std::string& mode : modes) {
    TITAN_CHECK(std::find(known_modes.begin(), known_modes.end(), mode) != known_modes.end(),
                "plan: activation checkpointing mode '{}' is not one of none, selective, full", mode);
  }
  const bool moe = layout_model_has_moe(config);
  const int64_t global_sequences = request.global_batch_tokens / request.seq_len;  // 0: one per dp rank

  std::vector<Layout> layouts;
  const auto emit = [&](Layout layout) {
    for (const std::string& mode : modes) {
      layout.activation_checkpoint = mode;
      layouts.push_back(layout);
    }
  };
  for (int64_t pp : layout_divisors(request.devices)) {
    if (pp > request.max_pipeline_degree) break;
    const int64_t after_pp = request.devices / pp;
    for (int64_t tp : layout_divisors(after_pp)) {
      for (int64_t cp : layout_divisors(after_pp / tp)) {
        const int64_t dp = after_pp / (tp * cp);
        for (int64_t dp_replicate : layout_divisors(dp)) {
          const int64_t dp_shard = dp / dp_replicate;
          for (int64_t ep : moe ? layout_divisors(dp_shard) : std::vector<int64_t>{1}) {
            Layout layout;
            layout.pp = pp;
            layout.tp = tp;
            layout.cp = cp;
            layout.dp_replicate = dp_replicate;
            layout.dp_shard = dp_shard;
            layout.ep = ep;
            if (!layout_degrees_refusal(layout, request, config).empty()) continue;
            const int64_t global = global_sequences > 0 ? global_sequences : dp;
            if (global % dp != 0) continue;  // the global batch does not split over the dp ranks
            const int64_t per_rank = global / dp;
            // Under pipelining the whole per-rank batch is one pass of
            // micro-batches: accumulating passes instead would only add
            // bubbles (a search space, not a rule).
            for (int64_t local : pp == 1 ? layout_batch_sizes(per_rank) : std::vector<int64_t>{per_rank}) {
              layout.local_batch_size = local;
              layout.gradient_accumulation = per_rank / local;
              if (!layout_batch_refusal(layout, request).empty()) continue;
              if (pp == 1) {
                layout.microbatch_size = local;
                emit(layout);
                continue;
              }
              for (const std::string& schedule : schedules) {
                layout.pipeline_schedule = schedule;
                layout.stages_per_rank = parallel::pipeline::stages_per_rank(schedule);
                for (int64_t microbatch : layout_batch_sizes(local)) {
                  // Fewer micro-batches than stages leave ranks idle through
                  // most of the pass: tried only when nothing smaller exists.
                  if (local / microbatch < pp && microbatch > 1) continue;
                  layout.microbatch_size = microbatch;
                  if (layout_pipeline_refusal(layout, config).empty()) emit(layout);
                }
              }
            }
          }
        }
      }
    }
  }
  return layouts;
}

void apply_layout(const Layout& layout, const PlanRequest& request, train::JobConfig& job) {
  job.model.name = request.model;
  job.model.flavor = request.flavor;
  if (request.vocab_size > 0) job.model.vocab_size = request.vocab_size;
  train::ParallelismSection& p = job.parallelism;
  p.data_parallel_replicate_degree = layout.dp_replicate;
  p.data_parallel_shard_degree = layout.dp_shard;  // explicit: no HSDP default across nodes
  p.context_parallel_degree = layout.cp;
  p.context_parallel_rotate_method = request.cp_rotate_method;
  p.tensor_parallel_degree = layout.tp;
  p.pipeline_parallel_degree = layout.pp;
  p.expert_parallel_degree = layout.ep;
  if (layout.pp > 1) {
    TITAN_CHECK(layout.stages_per_rank == parallel::pipeline::stages_per_rank(layout.pipeline_schedule),
                "plan: {} with {} stages per rank: titan's keys give {}", layout.pipeline_schedule,
                layout.stages_per_rank, parallel::pipeline::stages_per_rank(layout.pipeline_schedule));
    p.pipeline_parallel_schedule = layout.pipeline_schedule;
    p.pipeline_parallel_microbatch_size = layout.microbatch_size;
  } else {
    p.pipeline_parallel_microbatch_size = 1;
  }
  p.pipeline_parallel_layers_per_stage = -1;
  job.training.seq_len = request.seq_len;
  job.training.local_batch_size = layout.local_batch_size;
  job.training.global_batch_size = layout.local_batch_size * layout.dp() * layout.gradient_accumulation;
  job.training.mixed_precision_param = request.compute_dtype == DType::bf16 ? "bf16" : "f32";
  if (layout.pp > 1) {
    // The trainer refuses an MoE auxiliary loss across pipeline stages
    // (train/pipeline_plan.cpp): the enumerator proposes PP for such a flavor
    // only when given its config without one, which the job must then say.
    const models::DecoderConfig flavor = models::model_config(request.model, request.flavor);
    const bool aux_loss = std::any_of(flavor.layers.begin(), flavor.layers.end(),
                                      [](const auto& layer) { return layer.moe && layer.moe->aux_loss_coef != 0.0; });
    if (aux_loss) job.model.moe_aux_loss_coef = 0.0;
  }
  job.activation_checkpoint.mode = layout.activation_checkpoint;
  // "selective" is TorchTitan's per-op policy (selective_ac_option = "op"), what the cost model prices.
  job.activation_checkpoint.selective_ops = layout.activation_checkpoint == "selective";
}

std::string layout_job_toml(const Layout& layout, const PlanRequest& request) {
  train::JobConfig job;
  apply_layout(layout, request, job);
  // The flavor's vocabulary, not the training corpus tokenizer's (which would
  // otherwise size the model's embedding).
  if (job.model.vocab_size == 0) job.model.vocab_size = models::model_config(request.model, request.flavor).vocab_size;
  job.job.description = fmt::format("titan plan: {} {} on {} devices: {}", request.model, request.flavor,
                                    request.devices, layout.describe());
  job.job.dump_folder = fmt::format("./outputs/plan_{}_{}", request.model, request.flavor);
  job.training.steps = 20;
  job.lr_scheduler.warmup_steps = 2;
  job.metrics.log_freq = 1;
  job.checkpoint.enable = false;
  job.validation.enable = false;
  return fmt::format(
      "# {}\n# Written by `titan plan`; `titan train --config FILE` runs it (on the CPU backend as written: set\n"
      "# training.device = \"cuda\" for GPUs, where titan runs FSDP, CP and EP; TP and PP run on the CPU backend\n"
      "# only so far).\n\n{}",
      job.job.description, train::config_to_toml(job));
}

}  // namespace titan::plan
