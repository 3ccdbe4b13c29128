// Per-step training metrics: what the console line and metrics.jsonl report.
// Throughput is measured wall-clock over the whole step (data included);
// TFLOP/s uses the model family's FLOPs-per-token formula; MFU divides by the
// device peak (metrics.peak_tflops, or a measured GEMM peak on CPU).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "titan/core/device.h"

namespace titan::train {

struct StepMetrics {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0.0;
  double grad_norm = 0.0;
  double lr = 0.0;
  double step_seconds = 0.0;
  double host_seconds = 0.0;  // until the host had issued all of the step's device work
  double data_seconds = 0.0;  // waiting for the loader
  int64_t tokens = 0;         // this rank's tokens this step
  // Labels the loss counted this step (not ignored: data::kIgnoreIndex), over
  // the whole global batch (every micro-batch and data-parallel rank); the
  // loss is the mean over them.
  int64_t trained_tokens = 0;
  double tokens_per_second = 0.0;
  double tflops = 0.0;
  double mfu_percent = 0.0;
  double peak_memory_gib = 0.0;  // most bytes live during the step
  double step_memory_gib = 0.0;  // that peak over the bytes live when the step began: activations, gradients, buffers
  double reserved_memory_gib = 0.0;  // most bytes held from the system during the step
  double memory_percent = 0.0;       // peak as a share of the device's memory
  int64_t alloc_retries = 0;         // allocations that had to release the allocator's cache and retry
  double elapsed_seconds = 0.0;
  // Distributed runs: seconds collectives ran this step (busy) and seconds the
  // step waited for them (exposed); busy - exposed overlapped compute.
  double comm_busy_seconds = 0.0;
  double comm_exposed_seconds = 0.0;
  // The same step's collectives (and pipeline transfers) split by whether their
  // group spans nodes: count, bytes (each call's larger buffer) and busy seconds.
  int64_t comm_intra_node_collectives = 0, comm_cross_node_collectives = 0;
  int64_t comm_intra_node_bytes = 0, comm_cross_node_bytes = 0;
  double comm_intra_node_seconds = 0.0, comm_cross_node_seconds = 0.0;
  // Seconds the checkpoint save after the previous step held the run up (async:
  // the host copy; blocking: the whole write). A step's record is written
  // before its own save starts, so a save killed midway loses no record.
  double checkpoint_stall_seconds = 0.0;
  double fast_tier_stall_seconds = 0.0;    // the fast-tier save after the previous step (checkpoint.local_interval)
  double fast_tier_replica_seconds = 0.0;  // its transfer to the partner rank (part of fast_tier_stall_seconds)
  // Steps skipped so far for a non-finite loss or gradient (training.skip_nonfinite_steps).
  int64_t skipped_steps = 0;
  std::optional<double> validation_loss;
  // Fault tolerance (fault_tolerance.enable): replica groups in this step's
  // quorum and its id, steps this group took from a live peer instead of
  // training them (it had been down), the seconds that recovery and the
  // quorum took, and all-reduces redone after losing a peer group.
  std::optional<int64_t> replicas_live, ft_quorum_id, ft_steps_recovered, ft_retries;
  std::optional<double> ft_recover_seconds, ft_quorum_seconds, ft_commit_seconds;
  // Mixture of experts: the auxiliary loss (before its coefficient, averaged
  // over micro-batches and data-parallel ranks), and expert load as tokens of
  // the busiest expert over the mean, averaged over MoE layers and at the
  // worst layer (1 = perfectly balanced; counted over every rank's tokens).
  std::optional<double> aux_loss;
  std::optional<double> expert_load_mean;
  std::optional<double> expert_load_worst;
  int64_t expert_load_worst_layer = -1;
  // Pipeline parallelism, per pipeline rank: the share of the step's pipeline
  // passes spent waiting (not in a forward or backward: the bubble, and
  // transfers compute did not hide), and peak memory; and the bubble's mean.
  std::optional<double> pipeline_bubble;
  std::vector<double> pipeline_rank_bubble, pipeline_rank_peak_memory_gib;
  // Context parallelism, per cp rank: seconds in ring attention's kernels and
  // merges, seconds waiting for keys/values (or their gradients), peak and step memory.
  std::vector<double> context_parallel_rank_attention_seconds, context_parallel_rank_wait_seconds,
      context_parallel_rank_peak_memory_gib, context_parallel_rank_step_memory_gib;
};

// One metrics.jsonl record: every field of `metrics` by name (optional ones only when set).
nlohmann::json metrics_record(const StepMetrics& metrics);

class TensorBoardWriter;

// The console line, metrics.jsonl and, given a folder, TensorBoard scalars of
// the same record. A line that cannot be written (a full disk) is cut back off
// the file, so the file never holds half a record; the first failure is a
// warning naming the file and the reason (and that sink is dropped), or, with
// stop_on_write_error, an error that ends the job.
class MetricsLogger {
 public:
  MetricsLogger(const std::string& jsonl_path, bool progress, bool stop_on_write_error = false,
                const std::string& tensorboard_folder = "");
  ~MetricsLogger();
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;
  void log(const StepMetrics& metrics);
  // A record that is not a step's (the job's goodput, after `step`): to
  // metrics.jsonl, and to TensorBoard as scalars "<record>/<field>" (a text
  // field such as the restart tier as "<record>/<field>/<text>" = 1).
  void log_record(const nlohmann::json& record, int64_t step);
  // An image to TensorBoard (when on): `png` of height x width pixels, under `tag`.
  void log_image(int64_t step, const std::string& tag, int64_t height, int64_t width, std::string_view png);
  static std::string format_line(const StepMetrics& metrics, bool progress);

 private:
  void append_record(const std::string& line);

  std::string jsonl_path_;
  int jsonl_fd_ = -1;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // null when off
  bool progress_;
  bool stop_on_write_error_;
  bool warned_ = false;
};

// A non-step record as TensorBoard scalars: its objects' fields flattened to "<object>/<field>".
nlohmann::json record_scalars(const nlohmann::json& record);

// Total memory of the device tensors live on (host RAM for the CPU).
double device_memory_gib(Device device);

}  // namespace titan::train
