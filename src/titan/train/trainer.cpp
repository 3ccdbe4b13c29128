#include "titan/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "titan/comm/world.h"
#include "titan/core/allocator.h"
#include "titan/core/profiler.h"
#include "titan/core/units.h"
#include "titan/models/expert_load.h"
#include "titan/ops/cpu/isa.h"
#include "titan/train/config_loader.h"
#include "titan/train/device_peak.h"
#include "titan/train/job_paths.h"
#include "titan/train/job_setup.h"
#include "titan/train/nonfinite_step.h"
#include "titan/train/pipeline_plan.h"
#include "titan/train/preemption.h"
#include "titan/train/rehearsal_report.h"
#include "titan/train/validation.h"

namespace titan::train {
namespace {

using Clock = SteadyClock;
using comm::MeshDim;

// Eager steps before a step is recorded: the first ones allocate what every
// later step reuses (optimizer state, GEMM plans and workspaces, pinned
// staging), which must not happen inside the recording.
constexpr int64_t kGraphWarmupSteps = 2;

}  // namespace

Trainer::Trainer(JobConfig config, BatchSource batches) : config_(std::move(config)), batches_(std::move(batches)) {
  train::validate(config_);
  device_ = training_device(config_);
  // The mesh is checked against the world before any work starts.
  mesh_ = build_device_mesh(config_, device_);
  rank_ = mesh_->coordinate(MeshDim::world);
  reports_ = reports_for_job(config_, *mesh_);
  if (reports_) {
    for (const std::string& notice : config_.notices) std::printf("titan: note: %s\n", notice.c_str());
  }
  if (is_rehearsal(config_) && config_.checkpoint.enable) {
    // One rank's shards are not a checkpoint, and a rehearsal must leave a real job's folder as it was.
    std::printf("titan: rehearsal: checkpoint.enable is ignored; nothing is saved or loaded\n");
    config_.checkpoint.enable = false;
  }
  step_profiler_ = std::make_unique<StepProfiler>(config_, rank_);
  micro_batches_ = micro_batches_per_step(config_, *mesh_);
  // Checked before any work: under context parallelism the sequence must cut into 2 x cp equal chunks.
  const int64_t pipeline_micro_batches = mesh_->size(MeshDim::pp) > 1 ? pipeline_microbatches(config_) : 1;
  inputs_ = std::make_unique<StepInputsBuilder>(config_, *mesh_, device_, micro_batches_, pipeline_micro_batches);
  check_outputs_apart_from_inputs(config_);
  check_initial_load_path(config_);
  if (reports_) {
    dump_folder_lock_ = std::make_unique<DumpFolderLock>(config_.job.dump_folder);
    prepare_output_paths(config_);
    if (!dump_folder_lock_->previous_holder().empty()) {
      std::printf("titan: job.dump_folder %s was last locked by a job that has ended (%s); taking it over\n",
                  config_.job.dump_folder.c_str(), dump_folder_lock_->previous_holder().c_str());
    }
  }

  int64_t tokenizer_vocab = 0;
  if (!batches_) {
    loader_ = build_data_loader(config_, *mesh_);
    batches_ = [this] { return loader_->next_batch(); };
    tokenizer_vocab = loader_->vocab_size();
    if (reports_ && loader_->corpus().is_chat()) {
      std::printf("titan: chat dataset: %s\n", loader_->corpus().chat_stats().summary().c_str());
    }
  } else {
    TITAN_CHECK(!config_.validation.enable, "validation needs the job's dataset, not injected batches");
  }
  job_ = build_job_model(config_, *mesh_, device_, tokenizer_vocab, generator_);
  optimizer_ = build_optimizer(config_.optimizer, *job_.model);
  schedule_ = build_lr_schedule(config_, reports_);
  runner_ = std::make_unique<StepRunner>(*job_.model, *job_.parallelized,
                                         StepRunner::Pipelining{job_.pipeline.get(), job_.pipeline_micro_batches,
                                                                config_.parallelism.pipeline_parallel_microbatch_size},
                                         *optimizer_, config_.training.max_norm, device_);
  if (config_.training.graph_capture) captured_ = std::make_unique<CapturedStep>(*runner_, device_);
  double peak_tflops = config_.metrics.peak_tflops;
  if (peak_tflops <= 0) {
    // Ranks sharing a machine measure together, so each sees the share of the
    // cores it will train on; a rank still busy in an earlier collective would
    // otherwise steal cores from the others' measurement.
    mesh_->group(MeshDim::world)->barrier();
    peak_tflops = default_peak_tflops(device_, job_.compute_dtype);
  }
  meter_ = std::make_unique<StepMeter>(*mesh_, device_, job_.flops_per_token, peak_tflops, *job_.parallelized,
                                       job_.pipeline != nullptr);
  state_ = std::make_unique<TrainingState>(
      config_, *mesh_, device_, TrainingState::Parts{step_, job_, *optimizer_, schedule_, generator_, loader_.get()});
  state_->resume();
  if (config_.fault_tolerance.enable) {
    // After the resume: a group joins its first quorum with the steps its own checkpoint holds.
    fault_tolerance_ = std::make_unique<FaultTolerance>(
        config_, *mesh_, FaultTolerance::Parts{step_, *job_.model, *optimizer_, generator_, loader_.get()});
    runner_->before_clip = [this] { fault_tolerance_->average_gradients(); };
  }

  // One process reports for the job.
  if (!reports_) return;
  const std::filesystem::path dump_folder(config_.job.dump_folder);
  previous_run_last_step_ = last_logged_step((dump_folder / "metrics.jsonl").string());
  logger_ = std::make_unique<MetricsLogger>(
      (dump_folder / "metrics.jsonl").string(), config_.metrics.progress, config_.metrics.stop_on_write_error,
      config_.metrics.enable_tensorboard ? (dump_folder / config_.metrics.save_tb_folder).string() : std::string());
  print_banner();
}

Trainer::~Trainer() = default;

void Trainer::print_banner() const {
  int64_t state_bytes = 0;
  for (const Tensor& parameter : job_.model->parameters()) state_bytes += static_cast<int64_t>(parameter.nbytes());
  int64_t optimizer_bytes = 0;
  for (const auto& [name, moment] : optimizer_->state_tensors()) {
    optimizer_bytes += static_cast<int64_t>(moment.nbytes());
  }
  state_bytes += optimizer_bytes;
  const comm::ParallelDims& dims = mesh_->dims();
  std::printf(
      "titan: %s %s, %lld parameters, vocab %lld, seq %lld x batch %lld per rank (x%lld accumulation), %s compute, "
      "%s, %.2f TFLOP/s peak, %d rank(s): pp %lld x dp_replicate %lld x dp_shard %lld x cp %lld x tp %lld, %lld "
      "bytes of parameters and optimizer state on rank 0 (%lld of optimizer state)\n",
      config_.model.name.c_str(), config_.model.flavor.c_str(), static_cast<long long>(job_.parameters),
      static_cast<long long>(job_.model->config.vocab_size), static_cast<long long>(config_.training.seq_len),
      static_cast<long long>(config_.training.local_batch_size), static_cast<long long>(micro_batches_),
      dtype_name(job_.compute_dtype),
      device_.is_cpu() ? fmt::format("CPU kernels {}", ops::cpu::selected_isa()).c_str() : device_.str().c_str(),
      meter_->peak_tflops(), mesh_->size(MeshDim::world), static_cast<long long>(dims.pp),
      static_cast<long long>(dims.dp_replicate), static_cast<long long>(dims.dp_shard), static_cast<long long>(dims.cp),
      static_cast<long long>(dims.tp), static_cast<long long>(state_bytes), static_cast<long long>(optimizer_bytes));
  print_nodes_line();
  std::fputs(
      float8_summary(config_, job_.float8_linears.size(), job_.float8_experts.size(), job_.compute_dtype).c_str(),
      stdout);
  if (!config_.lora.enable) return;
  // This rank's shards: the ratio is what matters.
  int64_t trainable = 0, total = 0;
  for (auto& [name, parameter] : job_.model->named_parameters()) {
    total += parameter->data.numel();
    if (parameter->data.requires_grad()) trainable += parameter->data.numel();
  }
  std::printf("titan: LoRA rank %lld, alpha %g on %s: %lld trainable of %lld parameters on rank 0 (%.3f%%)\n",
              static_cast<long long>(config_.lora.rank), config_.lora.alpha,
              fmt::format("{}", fmt::join(config_.lora.target_modules, ",")).c_str(), static_cast<long long>(trainable),
              static_cast<long long>(total),
              100.0 * static_cast<double>(trainable) / static_cast<double>(std::max<int64_t>(total, 1)));
}

// Where the launcher (mpirun, srun) put the ranks: the nodes as titan sees
// them (SLURMD_NODENAME, else host names), which node-aware meshes follow.
void Trainer::print_nodes_line() const {
  const comm::World& world = comm::World::instance();
  if (!world.launched()) return;
  std::vector<int> ranks_on(static_cast<size_t>(world.nodes()), 0);
  for (const int node : world.node_of_rank()) ++ranks_on[static_cast<size_t>(node)];
  const auto [fewest, most] = std::minmax_element(ranks_on.begin(), ranks_on.end());
  std::printf("titan: %d rank(s) on %d node(s), %s rank(s) per node; rank 0 on %s\n", world.size(), world.nodes(),
              *fewest == *most ? std::to_string(*most).c_str() : fmt::format("{}-{}", *fewest, *most).c_str(),
              world.node_name().c_str());
}

StepMetrics Trainer::train_step() {
  const auto start = Clock::now();
  // Before the step's batch: a group behind the live ones takes their state (and data position) first.
  if (fault_tolerance_) fault_tolerance_->begin_step();
  ++step_;
  meter_->begin();
  // The host half: this step's batches on the device, the optimizer's scalars.
  const StepInputs step = inputs_->next(batches_, step_);
  const double lr = config_.optimizer.lr * schedule_.factor(step_);
  optimizer_->prepare(lr);
  // Eager steps update the weights only once the loss and gradient norm are
  // known to be finite; a recorded step holds its update.
  const bool replay = captured_ && eager_steps_ >= kGraphWarmupSteps;
  const StepOutputs out = replay ? captured_->run(step) : runner_->run(step, /*apply_update=*/false);
  if (!replay) ++eager_steps_;
  // Read back once the device has the whole step queued. Each loss is a mean
  // over its counted labels: weighted by their number, summed over every
  // rank's, over the global count, it is the mean over every trained label.
  // (A loss with none counts nothing: cross-entropy defines it as 0.)
  double loss_sum = 0.0, aux_sum = 0.0;
  for (size_t i = 0; i < out.losses.size(); ++i) {
    if (step.label_counts[i] > 0) loss_sum += out.losses[i].item() * static_cast<double>(step.label_counts[i]);
  }
  for (const Tensor& aux : out.aux_losses) aux_sum += aux.item();
  const std::vector<float> clip = out.clip.to_floats();

  StepMetrics m;
  m.step = step_;
  m.total_steps = config_.training.steps;
  // Under pipeline parallelism only the last stage's rank has the losses.
  comm::ProcessGroup& dp = *mesh_->group(MeshDim::dp_cp);
  const double summed = comm::all_reduce_scalar(*mesh_->group(MeshDim::pp), loss_sum, comm::ReduceOp::sum);
  m.loss = comm::all_reduce_scalar(dp, summed, comm::ReduceOp::avg) * static_cast<double>(dp.size()) /
           static_cast<double>(step.global_labels);
  m.trained_tokens = step.global_labels;
  if (!out.aux_losses.empty()) {
    m.aux_loss = comm::all_reduce_scalar(dp, aux_sum / static_cast<double>(micro_batches_), comm::ReduceOp::avg);
  }
  if (const auto load = models::balance_expert_load(*job_.model, *mesh_)) {
    m.expert_load_mean = load->mean;
    m.expert_load_worst = load->worst;
    m.expert_load_worst_layer = load->worst_layer;
  }
  m.grad_norm = clip[0];
  step_skipped_ = false;
  if (!std::isfinite(m.loss) || !std::isfinite(m.grad_norm)) {
    step_skipped_ = handle_nonfinite_step({step_, m, replay}, config_, *job_.model, *optimizer_,
                                          *mesh_->group(MeshDim::world), [this] {
                                            state_->save(/*async=*/false);
                                            state_->wait();
                                          });
  } else if (!replay) {
    const profiler::Span span("phase", "optimizer");
    optimizer_->apply();
    job_.parallelized->after_optimizer_step();
  }
  m.skipped_steps = goodput_.skipped_steps + (step_skipped_ ? 1 : 0);
  if (fault_tolerance_) fault_tolerance_->report(m);
  m.host_seconds = seconds_since(start);
  m.lr = lr;
  m.data_seconds = step.data_seconds;
  meter_->finish(m, step.tokens, seconds_since(start), runner_->pipeline_pass_seconds(),
                 runner_->pipeline_compute_seconds());
  return m;
}

double Trainer::validate() { return validation_loss(config_.validation, *loader_, *inputs_, job_, *mesh_, device_); }

const std::vector<StepMetrics>& Trainer::train() {
  PreemptionWatcher preemption;
  if (config_.checkpoint.create_seed_checkpoint) {
    TITAN_CHECK(mesh_->size(MeshDim::world) == 1,
                "checkpoint.create_seed_checkpoint runs in one process (it writes the "
                "initial full weights every later run loads), not {}",
                mesh_->size(MeshDim::world));
    TITAN_CHECK(step_ == 0, "checkpoint.create_seed_checkpoint: this job already has checkpoints (resumed at step {})",
                step_);
    state_->save_seed();
    return history_;
  }
  const CheckpointSection& checkpointing = config_.checkpoint;
  const bool saving = checkpointing.enable && !checkpointing.load_only;
  if (step_ >= config_.training.steps && reports_) {
    std::printf(
        "titan: resumed at step %lld of training.steps = %lld: nothing left to train (raise "
        "--training.steps to go on)\n",
        static_cast<long long>(step_), static_cast<long long>(config_.training.steps));
  }
  // Each stretch of the loop is timed from the end of the one before, so goodput's parts cover the wall time.
  forget_setup_collectives(*mesh_);
  auto mark = Clock::now();
  const auto lap = [&mark] {
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - mark).count();
    mark = now;
    return seconds;
  };
  goodput_.startup_seconds += std::chrono::duration<double>(mark - job_start_).count();
  double checkpoint_stall = 0.0;   // of the save after the previous step
  double fast_tier_stall = 0.0;    // of the fast-tier save after the previous step (snapshot and replica)
  double fast_tier_replica = 0.0;  // the replica's part of it
  goodput_.restart_tier = state_->restart_tier();
  goodput_.recover_seconds = state_->recover_seconds();
  while (step_ < config_.training.steps) {
    step_profiler_->begin_step(step_ + 1);
    StepMetrics metrics = train_step();
    const double step_seconds = lap();
    if (metrics.replicas_live) {
      goodput_.fault_tolerance = true;
      goodput_.ft_steps_recovered += *metrics.ft_steps_recovered;
      goodput_.ft_recover_seconds += *metrics.ft_recover_seconds;
      goodput_.ft_retries += *metrics.ft_retries;
      goodput_.ft_min_replicas_live = goodput_.ft_min_replicas_live == 0
                                          ? *metrics.replicas_live
                                          : std::min(goodput_.ft_min_replicas_live, *metrics.replicas_live);
    }
    if (step_ <= previous_run_last_step_) {
      goodput_.lost_seconds += step_seconds;
      ++goodput_.lost_steps;
    } else if (step_skipped_) {
      goodput_.skipped_seconds += step_seconds;
      ++goodput_.skipped_steps;
    } else {
      goodput_.data_wait_seconds += metrics.data_seconds;
      goodput_.productive_seconds += step_seconds - metrics.data_seconds;
    }
    if (config_.validation.enable && step_ % config_.validation.freq == 0) metrics.validation_loss = validate();
    goodput_.validation_seconds += lap();
    // Every rank learns whether any rank was signalled (and whether an async save is fully written).
    const bool stop = state_->end_of_step(preemption.requested(step_, rank_));
    const bool last = step_ == config_.training.steps;
    // The step's record is written before its checkpoint save starts, so a
    // save killed midway loses no record; the time the save holds the run up
    // is reported by the next step's record.
    metrics.checkpoint_stall_seconds = checkpoint_stall;
    metrics.fast_tier_stall_seconds = fast_tier_stall;
    metrics.fast_tier_replica_seconds = fast_tier_replica;
    checkpoint_stall = fast_tier_stall = fast_tier_replica = 0.0;
    history_.push_back(metrics);
    const bool log = step_ % config_.metrics.log_freq == 0 || last || metrics.validation_loss || stop;
    if (log && logger_) logger_->log(metrics);
    goodput_.other_seconds += lap();
    // The last step's save is state_->finish()'s, after the loop.
    const bool first_step_save = step_ == 1 && checkpointing.enable_first_step_checkpoint;
    if (saving && !last && (step_ % checkpointing.interval == 0 || first_step_save || stop)) {
      const profiler::Span span("phase", "checkpoint");
      checkpoint_stall = state_->save(config_.checkpoint.async_mode == "async");
    }
    goodput_.checkpoint_seconds += lap();
    if (saving && !last && state_->fast_tier_due(step_)) {
      const profiler::Span span("phase", "checkpoint");
      const FastTier::Cost cost = state_->save_fast();
      fast_tier_stall = lap();
      fast_tier_replica = cost.replica_seconds;
      goodput_.replica_seconds += cost.replica_seconds;
      goodput_.fast_tier_seconds += fast_tier_stall - cost.replica_seconds;
    }
    kill_if_asked(step_, state_->fast_tier());
    step_profiler_->end_step(step_);
    goodput_.other_seconds += lap();
    if (stop && !last) {
      state_->wait();
      goodput_.checkpoint_seconds += lap();
      report_goodput();
      if (reports_) {
        std::printf("titan: stopping after step %lld on a signal%s\n", static_cast<long long>(step_),
                    saving                    ? " (checkpoint saved; the next run resumes from it)"
                    : checkpointing.load_only ? " (checkpoint.load_only: not saved)"
                                              : " (checkpoints are off: not saved)");
        std::fflush(stdout);
      }
      return history_;
    }
  }
  {
    const profiler::Span span("phase", "checkpoint");
    // A rehearsal holds one rank's shards and its gathers are fake: there is
    // no model to export, and gathering a 405B model whole would not fit.
    if (!is_rehearsal(config_)) state_->finish();
  }
  goodput_.checkpoint_seconds += lap();
  report_goodput();
  if (is_rehearsal(config_)) {
    std::printf("%s", rehearsal_report(config_, *mesh_, history_, job_.memory_needed_bytes).c_str());
    std::fflush(stdout);
  }
  return history_;
}

void Trainer::report_goodput() {
  if (!reports_) return;
  std::printf("%s\n", goodput_.summary_line().c_str());
  std::fflush(stdout);
  if (logger_) logger_->log_record({{"goodput", goodput_.to_json()}}, step_);
}

}  // namespace titan::train
