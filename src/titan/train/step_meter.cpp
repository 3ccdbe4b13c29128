#include "titan/train/step_meter.h"

#include "titan/core/units.h"

namespace titan::train {
namespace {

using comm::MeshDim;

// The groups whose collectives a step runs (each counted once).
constexpr MeshDim kStepGroups[] = {MeshDim::dp_shard, MeshDim::dp_replicate, MeshDim::dp,         MeshDim::tp,
                                   MeshDim::pp,       MeshDim::cp,           MeshDim::dp_shard_cp};

}  // namespace

StepMeter::StepMeter(const comm::DeviceMesh& mesh, Device device, double flops_per_token, double peak_tflops,
                     const parallel::ParallelizedModel& parallelized, bool pipelined)
    : mesh_(mesh),
      device_(device),
      flops_per_token_(flops_per_token),
      peak_tflops_(peak_tflops),
      parallelized_(parallelized),
      pipelined_(pipelined) {}

void StepMeter::begin() {
  Allocator& allocator = allocator_for(device_.type);
  allocator.reset_peak();
  before_ = allocator.stats();
  for (MeshDim dim : kStepGroups) mesh_.group(dim)->reset_stats();
  if (parallelized_.ring_attention) parallelized_.ring_attention->reset_stats();
}

void StepMeter::finish(StepMetrics& m, int64_t tokens, double seconds, double pipeline_pass_seconds,
                       double pipeline_compute_seconds) {
  m.step_seconds = seconds;
  m.tokens = tokens;
  // Per device: the ranks of one tensor-, context- and pipeline-parallel group
  // share their dp rank's tokens (and its FLOPs), as TorchTitan counts it.
  m.tokens_per_second =
      static_cast<double>(tokens) / m.step_seconds /
      static_cast<double>(mesh_.size(MeshDim::tp) * mesh_.size(MeshDim::pp) * mesh_.size(MeshDim::cp));
  m.tflops = flops_per_token_ * m.tokens_per_second / 1e12;
  m.mfu_percent = 100.0 * m.tflops / peak_tflops_;
  const MemoryStats memory = allocator_for(device_.type).stats();
  m.peak_memory_gib = static_cast<double>(memory.peak_bytes) / kBytesPerGiB;
  m.reserved_memory_gib = static_cast<double>(memory.peak_reserved_bytes) / kBytesPerGiB;
  m.memory_percent = 100.0 * m.peak_memory_gib / device_memory_gib(device_);
  m.step_memory_gib = static_cast<double>(memory.peak_bytes - before_.live_bytes) / kBytesPerGiB;
  m.alloc_retries = memory.alloc_retries - before_.alloc_retries;
  if (pipelined_) pipeline_metrics(m, pipeline_pass_seconds, pipeline_compute_seconds);
  if (parallelized_.ring_attention) context_parallel_metrics(m);
  comm::CommStats comm;
  for (MeshDim dim : kStepGroups) comm += mesh_.group(dim)->stats();
  m.comm_busy_seconds = comm.busy_seconds;
  m.comm_exposed_seconds = comm.exposed_seconds;
  m.comm_cross_node_collectives = comm.cross_node_collectives;
  m.comm_cross_node_bytes = comm.cross_node_bytes;
  m.comm_cross_node_seconds = comm.cross_node_busy_seconds;
  m.comm_intra_node_collectives = comm.collectives - comm.cross_node_collectives;
  m.comm_intra_node_bytes = comm.bytes - comm.cross_node_bytes;
  m.comm_intra_node_seconds = comm.busy_seconds - comm.cross_node_busy_seconds;
  elapsed_seconds_ += m.step_seconds;
  m.elapsed_seconds = elapsed_seconds_;
}

void StepMeter::pipeline_metrics(StepMetrics& m, double pass_seconds, double compute_seconds) const {
  const double bubble = pass_seconds > 0 ? 1.0 - compute_seconds / pass_seconds : 0.0;
  const auto each = comm::gather_per_rank(*mesh_.group(MeshDim::pp), {bubble, m.peak_memory_gib});
  m.pipeline_rank_bubble = each[0];
  m.pipeline_rank_peak_memory_gib = each[1];
  double sum = 0.0;
  for (double rank_bubble : m.pipeline_rank_bubble) sum += rank_bubble;
  m.pipeline_bubble = sum / static_cast<double>(m.pipeline_rank_bubble.size());
}

void StepMeter::context_parallel_metrics(StepMetrics& m) const {
  const parallel::RingAttentionStats& ring = parallelized_.ring_attention->stats();
  const auto each = comm::gather_per_rank(
      *mesh_.group(MeshDim::cp), {ring.compute_seconds, ring.wait_seconds, m.peak_memory_gib, m.step_memory_gib});
  m.context_parallel_rank_attention_seconds = each[0];
  m.context_parallel_rank_wait_seconds = each[1];
  m.context_parallel_rank_peak_memory_gib = each[2];
  m.context_parallel_rank_step_memory_gib = each[3];
}

}  // namespace titan::train
