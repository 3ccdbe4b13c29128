#include "titan/train/memory_check.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "titan/core/allocator.h"
#include "titan/core/error.h"
#include "titan/distributed/world.h"
#include "titan/models/model_spec.h"
#include "titan/train/pipeline_plan.h"

namespace titan::train {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

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

}  // namespace

MemoryBudget job_memory_budget(const JobConfig& config, const models::DecoderConfig& model,
                               const distributed::ParallelDims& dims, Device device) {
  const int64_t tp = std::max<int64_t>(1, dims.tp);
  models::MemoryEstimateOptions options;
  options.batch = config.training.local_batch_size;
  options.seq_len = config.training.seq_len;
  options.compute_dtype = parse_dtype(config.training.mixed_precision_param);
  options.optimizer_state_dtype = parse_dtype(config.optimizer.state_dtype);
  options.activation_checkpoint = config.activation_checkpoint.mode;
  options.selective_every = config.activation_checkpoint.selective_every;
  // Tensor parallelism shards the weights too; the estimate only knows FSDP's shards.
  options.dp_shard = std::max<int64_t>(1, dims.dp_shard) * tp;
  options.cp = std::max<int64_t>(1, dims.cp);
  options.cp_rotate_method = config.parallelism.context_parallel_rotate_method;
  const models::ModelSpec& spec = models::model_spec(config.model.name);
  models::MemoryEstimate estimate;
  if (dims.pp > 1) {
    // Each pipeline rank holds its stages and the schedule's micro-batches in flight: the fullest rank counts.
    options.batch = config.parallelism.pipeline_parallel_microbatch_size;
    for (int rank = 0; rank < dims.pp; ++rank) {
      options.pipeline = plan_pipeline(config, spec, model, rank);
      const models::MemoryEstimate mine = spec.memory_estimate(model, options);
      if (rank == 0 || mine.total() > estimate.total()) estimate = mine;
    }
  } else {
    estimate = spec.memory_estimate(model, options);
  }
  // The estimate's activations are unsharded: under TP count only a rank's share (a lower bound).
  estimate.activation_bytes /= static_cast<double>(tp);
  // Every rank builds the full f32 model before keeping its shard (or its pipeline stages).
  const double full_model = 4.0 * static_cast<double>(estimate.model_parameters);
  // The loader keeps up to three batches (the step's, two prefetched) of four i64 tensors.
  const double batches = 3.0 * 4.0 * 8.0 * static_cast<double>(config.training.local_batch_size * options.seq_len);
  MemoryBudget budget;
  budget.needed_bytes = std::max(estimate.total(), full_model) + batches;
  budget.breakdown = fmt::format(
      "parameters {:.2f}, gradients {:.2f}, optimizer {:.2f}, compute copies {:.2f}, activations {:.2f}, "
      "loss {:.2f}, batches {:.2f} GiB; the full f32 model built before sharding {:.2f} GiB",
      estimate.parameter_bytes / kGiB, estimate.gradient_bytes / kGiB, estimate.optimizer_bytes / kGiB,
      estimate.compute_copy_bytes / kGiB, estimate.activation_bytes / kGiB, estimate.loss_bytes / kGiB, batches / kGiB,
      full_model / kGiB);
  if (device.is_cpu()) {
    const int ranks = std::max(1, distributed::World::instance().local_size());
    budget.available_bytes = host_available_bytes(budget.source) / ranks;
    if (ranks > 1) budget.source += fmt::format(", shared by the {} ranks on this host", ranks);
  } else {
    budget.available_bytes = static_cast<double>(memory_stats(device.type).capacity_bytes);
    budget.source = fmt::format("the memory of {}", device.str());
  }
  return budget;
}

void check_job_fits_memory(const JobConfig& config, const models::DecoderConfig& model,
                           const distributed::ParallelDims& dims, Device device) {
  if (!config.training.memory_check) return;
  const MemoryBudget budget = job_memory_budget(config, model, dims, device);
  if (budget.available_bytes <= 0 || budget.needed_bytes <= budget.available_bytes) return;
  fail(
      "this job needs about {:.1f} GiB per rank ({}) but has {:.1f} GiB ({}). To fit: shard the model over more "
      "ranks (parallelism.data_parallel_shard_degree, tensor_parallel_degree), recompute activations "
      "(activation_checkpoint.mode = full), lower training.local_batch_size or training.seq_len, or keep the AdamW "
      "moments in bf16 (optimizer.state_dtype); `titan estimate-memory` shows the same numbers. "
      "training.memory_check = false starts it anyway",
      budget.needed_bytes / kGiB, budget.breakdown, budget.available_bytes / kGiB, budget.source);
}

}  // namespace titan::train
