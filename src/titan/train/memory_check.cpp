#include "titan/train/memory_check.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "titan/comm/world.h"
#include "titan/core/allocator.h"
#include "titan/core/error.h"
#include "titan/core/units.h"
#include "titan/models/model_spec.h"
#include "titan/nn/lora_targets.h"
#include "titan/train/job_model_config.h"
#include "titan/train/pipeline_plan.h"

namespace titan::train {
namespace {

// MemAvailable (what can be allocated without swapping), or physical memory
// on kernels without it; capped by a cgroup v2 limit when one is set.
double host_available_bytes(std::string& source) {
  double available = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kib = 0;
    meminfo >> kib;
    if (key == "MemAvailable:") available = kib * 1024.0;
    meminfo.ignore(256, '\n');
  }
  source = "MemAvailable in /proc/meminfo";
  if (available <= 0) {
    available = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    source = "physical memory";
  }
  std::ifstream limit_file("/sys/fs/cgroup/memory.max"), usage_file("/sys/fs/cgroup/memory.current");
  std::string limit_text;
  double usage = 0;
  if (limit_file >> limit_text && limit_text != "max" && usage_file >> usage) {
    const double cgroup_free = std::stod(limit_text) - usage;
    if (cgroup_free < available) {
      available = std::max(0.0, cgroup_free);
      source = "this cgroup's memory.max";
    }
  }
  return available;
}

// "512 MiB", "1.25 GiB": small jobs' parts are not all 0.00 GiB.
std::string size_text(double bytes) {
  return bytes < kBytesPerGiB ? fmt::format("{:.3g} MiB", bytes / (1024.0 * 1024.0))
                              : fmt::format("{:.2f} GiB", bytes / kBytesPerGiB);
}

}  // namespace

MemoryBudget job_memory_budget(const JobConfig& config, const models::DecoderConfig& model,
                               const comm::ParallelDims& dims, Device device, std::optional<int> pp_rank) {
  const int64_t tp = std::max<int64_t>(1, dims.tp);
  models::MemoryEstimateOptions options;
  options.batch = config.training.local_batch_size;
  options.seq_len = config.training.seq_len;
  options.compute_dtype = parse_dtype(config.training.mixed_precision_param);
  options.optimizer_state_dtype = parse_dtype(config.optimizer.state_dtype);
  options.activation_checkpoint = config.activation_checkpoint.mode;
  options.selective_every = config.activation_checkpoint.selective_every;
  options.selective_ops = config.activation_checkpoint.selective_ops;
  options.dp_shard = std::max<int64_t>(1, dims.dp_shard);
  options.tp = tp;
  options.ep = std::max<int64_t>(1, dims.ep);
  const int64_t global = config.training.global_batch_size,
                step_batch = config.training.local_batch_size * std::max<int64_t>(1, dims.dp());
  options.microbatches = global > 0 && step_batch > 0 ? std::max<int64_t>(1, global / step_batch) : 1;
  options.cp = std::max<int64_t>(1, dims.cp);
  options.cp_rotate_method = config.parallelism.context_parallel_rotate_method;
  options.fused_loss = config.model.fused_loss;
  if (device.is_cpu()) options.cpu_threads = omp_get_max_threads();
  options.naive_attention = config.model.attention == "naive";
  // Offloaded activations go to host memory: on the CPU backend that is the same memory, so nothing is saved.
  if (device.is_cpu() && options.activation_checkpoint == "offload") options.activation_checkpoint = "none";
  if (config.lora.enable) {
    options.lora_rank = config.lora.rank;
    options.lora_dropout = config.lora.dropout > 0.0;
    for (const std::string& target : config.lora.target_modules) {
      if (const auto found = nn::find_lora_target(target)) options.lora_modules.emplace_back(found->module);
    }
  }
  const models::ModelSpec& spec = models::model_spec(config.model.name);
  models::MemoryEstimate estimate;
  if (dims.pp > 1) {
    // Each pipeline rank holds its stages and the schedule's micro-batches in flight: the fullest rank counts.
    options.batch = config.parallelism.pipeline_parallel_microbatch_size;
    options.pipeline_reshards = config.parallelism.fsdp_reshard_after_forward == "always";
    for (int rank = pp_rank.value_or(0); rank < (pp_rank ? *pp_rank + 1 : dims.pp); ++rank) {
      options.pipeline = plan_pipeline(config, spec, model, rank);
      const models::MemoryEstimate mine = spec.memory_estimate(model, options);
      if (rank == 0 || mine.total() > estimate.total()) estimate = mine;
    }
  } else {
    estimate = spec.memory_estimate(model, options);
  }
  // The loader keeps up to three batches (the step's, two prefetched) of four i64 tensors.
  const double batches = 3.0 * 4.0 * 8.0 * static_cast<double>(config.training.local_batch_size * options.seq_len);
  // An async save first copies the rank's state (weights and AdamW moments) to host memory.
  const bool async_save = config.checkpoint.enable && config.checkpoint.async_mode == "async";
  const double save_copy = async_save ? estimate.parameter_bytes + estimate.optimizer_bytes : 0.0;
  MemoryBudget budget;
  budget.needed_bytes = estimate.total() + batches + save_copy;
  // What needed_bytes is made of, the parts a job may not have left out.
  std::vector<std::string> parts{fmt::format("parameters {}", size_text(estimate.parameter_bytes)),
                                 fmt::format("gradients {}", size_text(estimate.gradient_bytes)),
                                 fmt::format("optimizer {}", size_text(estimate.optimizer_bytes)),
                                 fmt::format("compute copies {}", size_text(estimate.compute_copy_bytes)),
                                 fmt::format("activations {}", size_text(estimate.activation_bytes)),
                                 fmt::format("loss {}", size_text(estimate.loss_bytes)),
                                 fmt::format("attention workspace {}", size_text(estimate.workspace_bytes)),
                                 fmt::format("batches {}", size_text(batches))};
  if (estimate.adapter_parameters > 0) {
    parts.push_back(fmt::format("of which LoRA: {} adapter parameters with their gradients and moments",
                                estimate.adapter_parameters));
  }
  if (estimate.overlap_bytes > 0) {
    parts.push_back(fmt::format("less {} never alive at once (gradients fill as activations free)",
                                size_text(estimate.overlap_bytes)));
  }
  if (estimate.ring_attention_bytes > 0) {
    parts.push_back(fmt::format("ring attention {}", size_text(estimate.ring_attention_bytes)));
  }
  if (estimate.pipeline_buffer_bytes > 0) {
    parts.push_back(fmt::format("pipeline buffers {}", size_text(estimate.pipeline_buffer_bytes)));
  }
  if (async_save) parts.push_back(fmt::format("async checkpoint copy {}", size_text(save_copy)));
  budget.breakdown = fmt::format("{}", fmt::join(parts, ", "));
  if (device.is_cpu()) {
    const int ranks = std::max(1, comm::World::instance().local_size());
    budget.available_bytes = host_available_bytes(budget.source) / ranks;
    if (ranks > 1) budget.source += fmt::format(", shared by the {} ranks on this host", ranks);
  } else {
    budget.available_bytes = static_cast<double>(memory_stats(device.type).capacity_bytes);
    budget.source = fmt::format("the memory of {}", device.str());
  }
  return budget;
}

std::string MemoryBudget::summary() const {
  if (available_bytes <= 0) return fmt::format("needs about {:.3g} GiB per rank", needed_bytes / kBytesPerGiB);
  return fmt::format("needs about {:.3g} GiB per rank of {:.3g} GiB available ({:.0f}%; {})",
                     needed_bytes / kBytesPerGiB, available_bytes / kBytesPerGiB,
                     100.0 * needed_bytes / available_bytes, source);
}

MemoryBudget check_job_fits_memory(const JobConfig& config, const models::DecoderConfig& model,
                                   const comm::ParallelDims& dims, Device device) {
  MemoryBudget budget = job_memory_budget(config, model, dims, device);
  if (!config.training.memory_check || budget.fits()) return budget;
  fail(
      "this job needs about {:.1f} GiB per rank ({}) but has {:.1f} GiB ({}), of which it plans to use at most "
      "{:.0f}%. To fit: shard the model over more ranks (parallelism.data_parallel_shard_degree, "
      "tensor_parallel_degree), recompute activations (activation_checkpoint.mode = full), lower "
      "training.local_batch_size or training.seq_len, a smaller lora.rank, or keep the AdamW moments in bf16 "
      "(optimizer.state_dtype); `titan estimate-memory` shows the same numbers. training.memory_check = false "
      "starts it anyway",
      budget.needed_bytes / kBytesPerGiB, budget.breakdown, budget.available_bytes / kBytesPerGiB, budget.source,
      100.0 * MemoryBudget::kUsableFraction);
}

MemoryBudget check_generation_fits_memory(const models::DecoderConfig& model, DType weight_dtype, int64_t prompt_tokens,
                                          int64_t capacity) {
  const models::GenerationMemory memory =
      models::estimate_generation_memory(model, weight_dtype, prompt_tokens, capacity, omp_get_max_threads());
  MemoryBudget budget;
  budget.needed_bytes = memory.kv_cache_bytes + memory.forward_bytes;
  budget.available_bytes = host_available_bytes(budget.source);
  budget.breakdown = fmt::format(
      "KV cache of {} positions {:.2f} GiB, the prompt's forward {:.2f} GiB; the weights "
      "({:.2f} GiB) are already loaded",
      capacity, memory.kv_cache_bytes / kBytesPerGiB, memory.forward_bytes / kBytesPerGiB,
      memory.weight_bytes / kBytesPerGiB);
  TITAN_CHECK(budget.fits(),
              "generate: this needs about {:.2f} GiB more ({}) but {:.2f} GiB are available ({}): lower "
              "--max-new-tokens or shorten the prompt",
              budget.needed_bytes / kBytesPerGiB, budget.breakdown, budget.available_bytes / kBytesPerGiB,
              budget.source);
  return budget;
}

}  // namespace titan::train
