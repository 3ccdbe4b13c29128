// What a step cost: wall time, tokens per second and device, TFLOP/s and MFU
// (the model's FLOPs per token over the device's peak), memory, collective
// time, and under pipeline and context parallelism each rank's bubble, wait
// and memory. TorchTitan's accounting: the ranks of one tensor-, context- and
// pipeline-parallel group share their data-parallel rank's tokens.
#pragma once

#include "titan/comm/device_mesh.h"
#include "titan/core/allocator.h"
#include "titan/parallel/parallelized_model.h"
#include "titan/train/metrics.h"

namespace titan::train {

class StepMeter {
 public:
  StepMeter(const comm::DeviceMesh& mesh, Device device, double flops_per_token, double peak_tflops,
            const parallel::ParallelizedModel& parallelized, bool pipelined);

  // At a step's start: the allocator's peak, the collectives' and ring attention's counters reset.
  void begin();
  // At its end: `m` gets the figures of `tokens` tokens loaded by this rank in
  // `seconds`; the pipeline's passes took `pipeline_pass_seconds`, of which
  // `pipeline_compute_seconds` computing. Collective over pp and cp when those are on.
  void finish(StepMetrics& m, int64_t tokens, double seconds, double pipeline_pass_seconds,
              double pipeline_compute_seconds);
  double peak_tflops() const { return peak_tflops_; }

 private:
  void pipeline_metrics(StepMetrics& m, double pass_seconds, double compute_seconds) const;
  void context_parallel_metrics(StepMetrics& m) const;

  const comm::DeviceMesh& mesh_;
  Device device_;
  double flops_per_token_, peak_tflops_;
  const parallel::ParallelizedModel& parallelized_;
  bool pipelined_;
  MemoryStats before_;
  double elapsed_seconds_ = 0.0;
};

}  // namespace titan::train
