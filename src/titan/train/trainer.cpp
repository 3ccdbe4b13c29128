#include "titan/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/hf/hf_weights.h"
#include "titan/checkpoint/nonfinite_weights.h"
#include "titan/core/allocator.h"
#include "titan/core/profiler.h"
#include "titan/comm/flight_recorder.h"
#include "titan/parallel/grad_norm.h"
#include "titan/comm/routed_process_group.h"
#include "titan/parallel/tensor_parallel.h"
#include "titan/comm/world.h"
#include "titan/models/decoder_size.h"
#include "titan/models/lora_plan.h"
#include "titan/models/model_spec.h"
#include "titan/nn/functional.h"
#include "titan/ops/adamw.h"
#include "titan/core/copy.h"
#include "titan/ops/cpu/isa.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/grad_clip.h"
#include "titan/ops/reduction.h"
#include "titan/train/config_loader.h"
#include "titan/train/context_batch.h"
#include "titan/train/device_peak.h"
#include "titan/train/job_model_config.h"
#include "titan/train/job_paths.h"
#include "titan/train/memory_check.h"
#include "titan/train/model_export.h"
#include "titan/train/preemption.h"

namespace titan::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Eager steps before a step is recorded: the first ones allocate what every
// later step reuses (optimizer state, GEMM plans and workspaces, pinned
// staging), which must not happen inside the recording.
constexpr int64_t kGraphWarmupSteps = 2;

// Counted labels (not data::kIgnoreIndex) of a [rows, seq] labels tensor, per
// group of rows when it is cut into `parts` (pipeline micro-batches).
std::vector<int64_t> label_counts(const Tensor& labels, int64_t parts) {
  const std::vector<int64_t> values = labels.to(Device::cpu()).to_ints();
  const size_t per_part = values.size() / static_cast<size_t>(parts);
  std::vector<int64_t> counts(static_cast<size_t>(parts), 0);
  for (size_t i = 0; i < values.size(); ++i) counts[i / per_part] += values[i] != data::kIgnoreIndex ? 1 : 0;
  return counts;
}

}  // namespace

Trainer::Trainer(JobConfig config, BatchSource batches) : config_(std::move(config)), batches_(std::move(batches)) {
  train::validate(config_);
  const Device device = Device::parse(config_.training.device);
  device_ = device;
  TITAN_CHECK(!device.is_meta(), "training.device 'meta': meta tensors hold no data to train");
  TITAN_CHECK(device.is_cpu() || titan::copy_kernels.has_kernel(device.type),
              "training.device '{}': no CUDA device is visible to this process, or titan was built without the "
              "CUDA toolkit",
              config_.training.device);
  TITAN_CHECK(!device.is_cuda() || device.index == 0,
              "training.device '{}': a process trains on cuda:0; choose its GPU with CUDA_VISIBLE_DEVICES",
              config_.training.device);
  // The mesh is checked against the world before any work starts.
  comm::World& world = comm::World::instance(config_.comm.timeout_seconds);
  comm::FlightRecorder::instance().configure(
      config_.comm.trace_buf_size,
      (std::filesystem::path(config_.job.dump_folder) / config_.comm.save_traces_folder).string());
  const bool multi_gpu = device.is_cuda() && world.size() > 1;
  TITAN_CHECK(!multi_gpu || config_.parallelism.tensor_parallel_degree == 1,
              "parallelism.tensor_parallel_degree {} on CUDA: tensor parallelism runs on the CPU backend only so far "
              "(its vocabulary-parallel loss combines on the host)",
              config_.parallelism.tensor_parallel_degree);
  TITAN_CHECK(!multi_gpu || config_.parallelism.pipeline_parallel_degree == 1,
              "parallelism.pipeline_parallel_degree {} on CUDA: pipeline parallelism runs on the CPU backend only so "
              "far (NCCL matches sends and receives in issue order, without tags, which the pipeline runner's "
              "early-posted receives rely on)",
              config_.parallelism.pipeline_parallel_degree);
  TITAN_CHECK(!multi_gpu || config_.parallelism.context_parallel_degree == 1 ||
                  config_.parallelism.context_parallel_rotate_method == "allgather",
              "parallelism.context_parallel_rotate_method alltoall on CUDA: the ring's point-to-point passes run on "
              "the CPU backend only so far (NCCL matches sends and receives in issue order, and every rank receives "
              "before it sends); use allgather",
              config_.parallelism.context_parallel_rotate_method);
  TITAN_CHECK(!multi_gpu || !config_.training.graph_capture,
              "training.graph_capture with {} processes: a recorded step cannot wait for NCCL from the host; "
              "capture runs single-GPU jobs only so far",
              world.size());
  const comm::ParallelDims dims{
      config_.parallelism.pipeline_parallel_degree,   config_.parallelism.data_parallel_replicate_degree,
      config_.parallelism.data_parallel_shard_degree, config_.parallelism.context_parallel_degree,
      config_.parallelism.tensor_parallel_degree,     config_.parallelism.expert_parallel_degree};
  // On GPUs, device tensors travel through NCCL and the host's small
  // agreements (preemption, validation totals) through MPI.
  std::shared_ptr<comm::ProcessGroup> root = world.group();
  if (multi_gpu) {
    root = std::make_shared<comm::RoutedProcessGroup>(world.group(), comm::make_process_group("nccl", 0));
  }
  mesh_ = std::make_unique<comm::DeviceMesh>(dims, root);
  rank_ = world.rank();
  step_profiler_ = std::make_unique<StepProfiler>(config_, rank_);
  // Checked before any work: the sequence must cut into 2 x cp equal chunks.
  const parallel::RotateMethod rotate =
      parallel::parse_rotate_method(config_.parallelism.context_parallel_rotate_method);
  const bool load_balance = parallel::parse_load_balancer(config_.parallelism.context_parallel_load_balancer);
  if (mesh_->size("cp") > 1) {
    context_layout_ = parallel::SequenceLayout{config_.training.seq_len, mesh_->size("cp"), load_balance};
    context_layout_->check("training.seq_len");
  }
  check_outputs_apart_from_inputs(config_);
  if (rank_ == 0) {
    dump_folder_lock_ = std::make_unique<DumpFolderLock>(config_.job.dump_folder);
    prepare_output_paths(config_);
    if (!dump_folder_lock_->previous_holder().empty()) {
      std::printf("titan: job.dump_folder %s was last locked by a job that has ended (%s); taking it over\n",
                  config_.job.dump_folder.c_str(), dump_folder_lock_->previous_holder().c_str());
    }
  }

  int64_t tokenizer_vocab = 0;
  if (!batches_) {
    data::DataLoaderConfig data;
    data.paths = {config_.training.dataset_path};
    data.tokenizer = config_.model.tokenizer_path;
    data.seq_len = config_.training.seq_len;
    data.local_batch = config_.training.local_batch_size;
    data.seed = static_cast<uint64_t>(config_.training.seed);
    data.validation_fraction = config_.validation.enable ? config_.validation.split : 0.0;
    data.document_masking = config_.model.document_masking;
    data.dp_rank = mesh_->coordinate("dp");
    data.dp_world = mesh_->size("dp");
    data.chat = chat_options(config_);  // chat data: rendered, packed whole, masked (data/chat_dataset.h)
    loader_ = std::make_unique<data::DataLoader>(data);
    batches_ = [this] { return loader_->next_batch(); };
    tokenizer_vocab = loader_->vocab_size();
    if (rank_ == 0 && loader_->corpus().is_chat()) {
      std::printf("titan: chat dataset: %s\n", loader_->corpus().chat_stats().summary().c_str());
    }
  } else {
    TITAN_CHECK(!config_.validation.enable, "validation needs the job's dataset, not injected batches");
  }
  // A Hugging Face config.json fixes the vocabulary (its embedding rows); otherwise the tokenizer sizes it.
  const bool from_hf = !config_.model.hf_config.empty();
  const int64_t requested_vocab =
      config_.model.vocab_size > 0 ? config_.model.vocab_size : (from_hf ? 0 : tokenizer_vocab);
  TITAN_CHECK(from_hf || requested_vocab > 0, "model.vocab_size is not set and there is no tokenizer to take it from");
  models::DecoderConfig model_config = resolve_model_config(config_, requested_vocab);
  const int64_t vocab = model_config.vocab_size;
  TITAN_CHECK(vocab >= tokenizer_vocab, "model.vocab_size {} is smaller than the tokenizer's {} ids", vocab,
              tokenizer_vocab);
  const models::ModelSpec& spec = models::model_spec(config_.model.name);
  const MemoryBudget memory = check_job_fits_memory(config_, model_config, mesh_->dims(), device);
  if (rank_ == 0) std::printf("titan: memory: this job %s\n", memory.summary().c_str());
  model_ = spec.build(model_config, device);
  generator_ = Generator(static_cast<uint64_t>(config_.training.seed));
  model_->init_weights(generator_);
  // A Hugging Face folder holds full weights: they are read before the model is
  // sharded. (A titan checkpoint is read after, by resume(), in any mesh.)
  if (models::is_hf_model_folder(config_.checkpoint.initial_load_path))
    models::load_hf_weights_into(*model_, config_.checkpoint.initial_load_path);
  // So does a titan model export (a job with checkpoints off writes only that).
  if (is_model_export_folder(config_.checkpoint.initial_load_path))
    load_exported_weights_into(*model_, config_.checkpoint.initial_load_path);
  // LoRA: adapters on the loaded base weights, which freeze (before any split, so every parallelism sees them).
  int64_t lora_parameters = 0;  // the adapters', whole (before any sharding)
  if (config_.lora.enable) {
    const LoraSection& l = config_.lora;
    models::apply_lora(*model_, {l.rank, l.alpha, l.dropout, l.target_modules}, generator_, &generator_);
    for (auto& [name, parameter] : model_->named_parameters()) {
      if (parameter->data.requires_grad()) lora_parameters += parameter->data.numel();
    }
  }
  // Pipeline stages keep their parts of the same initial weights.
  if (mesh_->size("pp") > 1) setup_pipeline(spec);
  // Every rank initialises the same full weights from the seed, then keeps its shard.
  const DType compute_dtype = parse_dtype(config_.training.mixed_precision_param);
  models::ParallelizeOptions parallelize;
  parallelize.param_dtype = compute_dtype;
  parallelize.activation_checkpoint = parallel::parse_activation_checkpoint_mode(config_.activation_checkpoint.mode);
  parallelize.selective_every = config_.activation_checkpoint.selective_every;
  parallelize.reshard_after_forward = parallel::parse_reshard_policy(config_.parallelism.fsdp_reshard_after_forward);
  parallelize.context_parallel_rotate = rotate;
  parallelize.context_parallel_load_balance = load_balance;
  // As TorchTitan: under pipeline parallelism the default keeps blocks gathered, for the step's many micro-batches.
  if (pipeline_ && parallelize.reshard_after_forward == parallel::ReshardPolicy::default_policy) {
    parallelize.reshard_after_forward = parallel::ReshardPolicy::never;
  }
  const models::ParallelizedModel parallelized = spec.parallelize(*model_, *mesh_, parallelize);
  fsdp_ = parallelized.fsdp;
  ring_attention_ = parallelized.ring_attention;
  if (fsdp_ && pipeline_) fsdp_->set_reduce_in_backward(false);

  std::vector<std::pair<std::string, Tensor>> named;
  // Frozen parameters (LoRA's base weights) get no gradient and no optimizer state.
  for (auto& [name, parameter] : model_->named_parameters()) {
    if (parameter->data.requires_grad()) named.emplace_back(name, parameter->data);
  }
  optim::AdamWOptions options{
      config_.optimizer.beta1,        config_.optimizer.beta2,           config_.optimizer.eps,
      config_.optimizer.weight_decay, config_.optimizer.no_weight_decay, parse_dtype(config_.optimizer.state_dtype)};
  optimizer_ = std::make_unique<optim::AdamW>(std::move(named), options);
  // As TorchTitan does: a warmup longer than the run is cut to the run, and said so.
  const int64_t warmup = std::min(config_.lr_scheduler.warmup_steps, config_.training.steps);
  if (warmup < config_.lr_scheduler.warmup_steps && rank_ == 0) {
    std::printf("titan: warning: lr_scheduler.warmup_steps %lld exceeds training.steps %lld: warming up over %lld\n",
                static_cast<long long>(config_.lr_scheduler.warmup_steps),
                static_cast<long long>(config_.training.steps), static_cast<long long>(warmup));
  }
  schedule_ = {warmup, config_.training.steps, config_.lr_scheduler.decay_ratio, config_.lr_scheduler.decay_type,
               config_.lr_scheduler.min_lr_factor};

  const int64_t local = config_.training.local_batch_size * mesh_->size("dp");
  const int64_t global = config_.training.global_batch_size > 0 ? config_.training.global_batch_size : local;
  TITAN_CHECK(global % local == 0,
              "training.global_batch_size {} is not a multiple of local_batch_size x data-parallel ranks = {}", global,
              local);
  accumulation_ = global / local;
  flops_per_token_ = spec.flops_per_token(model_config, config_.training.seq_len);
  if (config_.lora.enable) {
    // The 6 FLOPs per weight per token are 2 forward, 2 for the input gradient and
    // 2 for the weight gradient, which frozen base weights skip; the adapters
    // cost the full 6. (Counted before any sharding: whole-model numbers.)
    const double base_matrices = static_cast<double>(models::active_parameter_count(model_config) -
                                                     model_config.vocab_size * model_config.dim());
    flops_per_token_ += -2.0 * base_matrices + 6.0 * static_cast<double>(lora_parameters);
  }
  if (config_.metrics.peak_tflops > 0) {
    peak_tflops_ = config_.metrics.peak_tflops;
  } else {
    // Ranks sharing a machine measure together, so each sees the share of the
    // cores it will train on; a rank still busy in an earlier collective would
    // otherwise steal cores from the others' measurement.
    world.group()->barrier();
    peak_tflops_ = default_peak_tflops(device, compute_dtype);
  }
  checkpointer_ = std::make_unique<Checkpointer>(config_, *mesh_);
  resume();
  // Loaded weights holding NaN or Inf are refused before the first step
  // (each rank checks what it holds: its shards, its stages).
  const std::string loaded_from =
      resumed_step_ >= 0
          ? (std::filesystem::path(checkpointer_->root()) / checkpoint::step_folder_name(resumed_step_)).string()
          : config_.checkpoint.initial_load_path;
  if (!loaded_from.empty()) {
    std::vector<std::pair<std::string, Tensor>> weights;
    for (auto& [name, parameter] : model_->named_parameters()) weights.emplace_back(name, parameter->data);
    checkpoint::check_finite_weights(weights, loaded_from, config_.checkpoint.allow_nonfinite_weights,
                                     "--checkpoint.allow_nonfinite_weights");
  }

  // Rank 0 reports for the job.
  if (rank_ != 0) return;
  previous_run_last_step_ =
      last_logged_step((std::filesystem::path(config_.job.dump_folder) / "metrics.jsonl").string());
  int64_t state_bytes = 0;
  for (const Tensor& parameter : model_->parameters()) state_bytes += static_cast<int64_t>(parameter.nbytes());
  int64_t optimizer_bytes = 0;
  for (const auto& [name, moment] : optimizer_->state_tensors())
    optimizer_bytes += static_cast<int64_t>(moment.nbytes());
  state_bytes += optimizer_bytes;
  const std::filesystem::path dump_folder(config_.job.dump_folder);
  logger_ = std::make_unique<MetricsLogger>(
      (dump_folder / "metrics.jsonl").string(), config_.metrics.progress, config_.metrics.stop_on_write_error,
      config_.metrics.enable_tensorboard ? (dump_folder / config_.metrics.save_tb_folder).string() : std::string());
  std::printf(
      "titan: %s %s, %lld parameters, vocab %lld, seq %lld x batch %lld per rank (x%lld accumulation), %s compute, "
      "%s, %.2f TFLOP/s peak, %d rank(s): pp %lld x dp_replicate %lld x dp_shard %lld x cp %lld x tp %lld, %lld "
      "bytes of parameters and optimizer state on rank 0 (%lld of optimizer state)\n",
      config_.model.name.c_str(), config_.model.flavor.c_str(),
      static_cast<long long>(models::parameter_count(model_config)), static_cast<long long>(vocab),
      static_cast<long long>(config_.training.seq_len), static_cast<long long>(config_.training.local_batch_size),
      static_cast<long long>(accumulation_), dtype_name(compute_dtype),
      device.is_cpu() ? fmt::format("CPU kernels {}", ops::cpu::selected_isa()).c_str() : device.str().c_str(),
      peak_tflops_, world.size(), static_cast<long long>(mesh_->dims().pp),
      static_cast<long long>(mesh_->dims().dp_replicate), static_cast<long long>(mesh_->dims().dp_shard),
      static_cast<long long>(mesh_->dims().cp), static_cast<long long>(mesh_->dims().tp),
      static_cast<long long>(state_bytes), static_cast<long long>(optimizer_bytes));
  if (config_.lora.enable) {
    // This rank's shards: the ratio is what matters.
    int64_t trainable = 0, total = 0;
    for (auto& [name, parameter] : model_->named_parameters()) {
      total += parameter->data.numel();
      if (parameter->data.requires_grad()) trainable += parameter->data.numel();
    }
    std::printf("titan: LoRA rank %lld, alpha %g on %s: %lld trainable of %lld parameters on rank 0 (%.3f%%)\n",
                static_cast<long long>(config_.lora.rank), config_.lora.alpha,
                fmt::format("{}", fmt::join(config_.lora.target_modules, ",")).c_str(),
                static_cast<long long>(trainable), static_cast<long long>(total),
                100.0 * static_cast<double>(trainable) / static_cast<double>(std::max<int64_t>(total, 1)));
  }
}

Trainer::~Trainer() = default;

data::Batch Trainer::local_batch(const data::Batch& batch) const {
  if (!context_layout_) return batch;
  return context_shard(batch, *context_layout_, mesh_->coordinate("cp"), config_.model.document_masking);
}

models::DecoderInputs Trainer::model_inputs(const data::Batch& batch) const {
  models::DecoderInputs inputs{batch.input_ids.to(device_), {}, {}};
  // A context-parallel slice carries its global positions.
  if (config_.model.document_masking || context_layout_) inputs.positions = batch.positions.to(device_);
  if (config_.model.document_masking) inputs.document_ids = batch.document_ids.to(device_);
  return inputs;
}

StepMetrics Trainer::train_step() {
  const auto start = Clock::now();
  ++step_;
  Allocator& allocator = allocator_for(device_.type);
  allocator.reset_peak();
  const MemoryStats before = allocator.stats();
  for (const std::string dim : {"dp_shard", "dp_replicate", "dp", "tp", "pp", "cp", "dp_shard_cp"}) {
    mesh_->group(dim)->reset_stats();
  }
  if (ring_attention_) ring_attention_->reset_stats();
  // The host half: this step's batches on the device, the optimizer's scalars.
  double data_seconds = 0.0;
  int64_t tokens = 0;
  StepInputs step;
  for (int64_t micro = 0; micro < accumulation_; ++micro) {
    const auto data_start = Clock::now();
    const data::Batch loaded = [&] {
      const profiler::Span span("phase", "data");
      return batches_();
    }();
    data_seconds += seconds_since(data_start);
    tokens += loaded.input_ids.numel();
    const data::Batch batch = local_batch(loaded);
    for (int64_t count : label_counts(batch.labels, pipeline_microbatches_)) step.label_counts.push_back(count);
    step.inputs.push_back(model_inputs(batch));
    step.labels.push_back(batch.labels.to(device_));
  }
  const int64_t trained_tokens = token_loss_scales(step);
  const double lr = config_.optimizer.lr * schedule_.factor(step_);
  optimizer_->prepare(lr);
  // Eager steps update the weights only once the loss and gradient norm are
  // known to be finite; a recorded step holds its update.
  const bool replay = config_.training.graph_capture && eager_steps_ >= kGraphWarmupSteps;
  const StepOutputs out = replay ? replay_captured_step(step) : run_device_step(step, /*apply_update=*/false);
  if (!captured_) ++eager_steps_;
  // Read back once the device has the whole step queued.
  // Each loss is a mean over its counted labels: weighted by their number, summed
  // over every rank's, over the global count, it is the mean over every trained label.
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
  m.loss = mean_over_dp(sum_over_pp(loss_sum)) * static_cast<double>(mesh_->size("dp_cp")) /
           static_cast<double>(trained_tokens);
  m.trained_tokens = trained_tokens;
  if (!out.aux_losses.empty()) m.aux_loss = mean_over_dp(aux_sum / static_cast<double>(accumulation_));
  finish_moe_step(m);
  m.grad_norm = clip[0];
  step_skipped_ = false;
  if (!std::isfinite(m.loss) || !std::isfinite(m.grad_norm)) {
    handle_nonfinite_step(m, replay);
  } else if (!replay) {
    const profiler::Span span("phase", "optimizer");
    optimizer_->apply();
  }
  m.skipped_steps = goodput_.skipped_steps + (step_skipped_ ? 1 : 0);
  const double host_seconds = seconds_since(start);
  m.lr = lr;
  m.step_seconds = seconds_since(start);
  m.host_seconds = host_seconds;
  m.data_seconds = data_seconds;
  m.tokens = tokens;
  // Per device: the ranks of one tensor-, context- and pipeline-parallel group
  // share their dp rank's tokens (and its FLOPs), as TorchTitan counts it.
  m.tokens_per_second = static_cast<double>(tokens) / m.step_seconds /
                        static_cast<double>(mesh_->size("tp") * mesh_->size("pp") * mesh_->size("cp"));
  m.tflops = flops_per_token_ * m.tokens_per_second / 1e12;
  m.mfu_percent = 100.0 * m.tflops / peak_tflops_;
  const MemoryStats memory = allocator.stats();
  m.peak_memory_gib = static_cast<double>(memory.peak_bytes) / kGiB;
  m.reserved_memory_gib = static_cast<double>(memory.peak_reserved_bytes) / kGiB;
  m.memory_percent = 100.0 * m.peak_memory_gib / device_memory_gib(device_);
  m.step_memory_gib = static_cast<double>(memory.peak_bytes - before.live_bytes) / kGiB;
  m.alloc_retries = memory.alloc_retries - before.alloc_retries;
  if (pipeline_) pipeline_metrics(m);
  if (ring_attention_) context_parallel_metrics(m);
  for (const std::string dim : {"dp_shard", "dp_replicate", "dp", "tp", "pp", "cp", "dp_shard_cp"}) {
    const comm::CommStats comm = mesh_->group(dim)->stats();
    m.comm_busy_seconds += comm.busy_seconds;
    m.comm_exposed_seconds += comm.exposed_seconds;
  }
  elapsed_seconds_ += m.step_seconds;
  m.elapsed_seconds = elapsed_seconds_;
  return m;
}

void Trainer::finish_moe_step(StepMetrics& m) {
  const std::vector<nn::TransformerBlockConfig>& configs = model_->config.layers;
  if (std::none_of(configs.begin(), configs.end(), [](const auto& layer) { return layer.moe.has_value(); })) return;
  // Each layer's busiest expert over the mean load; -1 for layers another pipeline stage holds.
  std::vector<double> ratios(configs.size(), -1.0);
  for (size_t i = 0; i < model_->layers->size(); ++i) {
    nn::MoE* moe = (*model_->layers)[i]->moe.get();
    if (moe == nullptr) continue;
    // Every rank that routed its own tokens: the data-parallel ranks, and under
    // sequence parallelism the tensor-parallel ranks, which route a slice each.
    Tensor total = moe->tokens_per_expert->clone();
    for (const char* dim : {"dp_cp", "tp"}) {
      if (mesh_->size(dim) > 1) mesh_->group(dim)->all_reduce(total, comm::ReduceOp::sum)->wait();
    }
    const std::vector<float> load = total.to_floats();
    double sum = 0.0, busiest = 0.0;
    for (float tokens : load) {
      sum += tokens;
      busiest = std::max(busiest, static_cast<double>(tokens));
    }
    ratios[static_cast<size_t>(std::stoll(model_->layers->key(i)))] =
        sum > 0 ? busiest / (sum / static_cast<double>(load.size())) : 0.0;
    moe->update_expert_bias(total);
    titan::fill_(*moe->tokens_per_expert, 0.0);
  }
  if (mesh_->size("pp") > 1) {
    const std::vector<float> mine(ratios.begin(), ratios.end());
    Tensor all = Tensor::from_floats(mine, {static_cast<int64_t>(mine.size())});
    mesh_->group("pp")->all_reduce(all, comm::ReduceOp::max)->wait();
    const std::vector<float> combined = all.to_floats();
    ratios.assign(combined.begin(), combined.end());
  }
  double ratio_sum = 0.0;
  int64_t moe_layers = 0;
  for (size_t layer = 0; layer < ratios.size(); ++layer) {
    if (ratios[layer] < 0) continue;
    ratio_sum += ratios[layer];
    ++moe_layers;
    if (!m.expert_load_worst || ratios[layer] > *m.expert_load_worst) {
      m.expert_load_worst = ratios[layer];
      m.expert_load_worst_layer = static_cast<int64_t>(layer);
    }
  }
  if (moe_layers > 0) m.expert_load_mean = ratio_sum / static_cast<double>(moe_layers);
}

void Trainer::context_parallel_metrics(StepMetrics& m) const {
  const parallel::RingAttentionStats& ring = ring_attention_->stats();
  const auto each = comm::gather_per_rank(
      *mesh_->group("cp"), {ring.compute_seconds, ring.wait_seconds, m.peak_memory_gib, m.step_memory_gib});
  m.context_parallel_rank_attention_seconds = each[0];
  m.context_parallel_rank_wait_seconds = each[1];
  m.context_parallel_rank_peak_memory_gib = each[2];
  m.context_parallel_rank_step_memory_gib = each[3];
}

Trainer::StepOutputs Trainer::run_device_step(const StepInputs& step, bool apply_update) {
  NoHostReadsScope no_host_reads("the training step's device work");
  StepOutputs out;
  model_->zero_grad();
  if (pipeline_) run_pipeline_step(step, out);
  for (int64_t micro = 0; micro < accumulation_ && !pipeline_; ++micro) {
    const profiler::Span span("phase", "forward_backward");
    models::LossParts parts;
    Tensor loss =
        model_->loss(step.inputs[static_cast<size_t>(micro)], step.labels[static_cast<size_t>(micro)], &parts);
    out.losses.push_back(parts.lm);
    if (parts.aux.defined()) out.aux_losses.push_back(parts.aux);
    // A device scalar, not a constant: a recorded step replays with each step's label counts.
    loss = F::mul(loss, step.loss_scale_tensors[static_cast<size_t>(micro)]);
    autograd::backward({loss});
    if (fsdp_) {
      fsdp_->set_sync_replicas(micro + 1 == accumulation_);
      fsdp_->finish_backward();
    }
  }
  if (nonfinite_injection_.first == step_) {
    for (auto& [name, parameter] : model_->named_parameters()) {
      if (name == nonfinite_injection_.second && parameter->data.grad().defined()) {
        titan::fill_(parameter->data.grad().view({-1}).narrow(0, 0, 1), std::nan(""));
      }
    }
  }
  {
    const profiler::Span span("phase", "clip_gradients");
    out.clip = synchronize_and_clip_gradients();
  }
  if (apply_update) {
    const profiler::Span span("phase", "optimizer");
    optimizer_->apply();
  }
  return out;
}

void Trainer::handle_nonfinite_step(const StepMetrics& m, bool update_applied) {
  const std::string culprit = first_nonfinite_gradient();
  const std::string what =
      fmt::format("step {}: the loss is {} and the gradient norm {}{}", step_, m.loss, m.grad_norm,
                  culprit.empty() ? std::string(" (every gradient is finite: the loss alone is not)")
                                  : fmt::format("; the first parameter whose gradient is not finite is {}", culprit));
  if (config_.training.skip_nonfinite_steps && !update_applied) {
    step_skipped_ = true;
    // AdamW counted the step when it prepared it; its bias corrections must not.
    optimizer_->set_steps_taken(optimizer_->steps_taken() - 1);
    if (rank_ == 0) {
      std::printf("titan: warning: %s. Skipping the step (no update; training.skip_nonfinite_steps)\n", what.c_str());
      std::fflush(stdout);
    }
    return;
  }
  // The weights are still those before this step: worth keeping to look into.
  const bool save = config_.checkpoint.enable && !update_applied;
  if (save) {
    save_checkpoint(/*async=*/false);
    checkpointer_->wait();
  }
  fail("{}. Stopping{}", what,
       update_applied ? " (the recorded step already applied its update: no checkpoint saved)"
       : save         ? fmt::format(" after saving checkpoint step-{} (the weights before this step's update, the data "
                                            "position after its batches); training.skip_nonfinite_steps = true skips such steps",
                                    step_)
                      : " (checkpoints are off); training.skip_nonfinite_steps = true skips such steps instead");
}

std::string Trainer::first_nonfinite_gradient() {
  std::string mine;
  for (auto& [name, parameter] : model_->named_parameters()) {
    const Tensor grad = parameter->data.grad();
    if (!grad.defined()) continue;
    const std::vector<float> values = grad.to(Device::cpu()).to_floats();
    if (std::any_of(values.begin(), values.end(), [](float v) { return !std::isfinite(v); })) {
      mine = name;
      break;
    }
  }
  const auto& world = mesh_->group("world");
  if (world->size() == 1) return mine;
  // The lowest rank that found one tells the others its name.
  Tensor claim = Tensor::full({1}, mine.empty() ? 0.0 : static_cast<double>(world->size() - world->rank()), DType::f32);
  world->all_reduce(claim, comm::ReduceOp::max)->wait();
  const int claimed = static_cast<int>(claim.item());
  if (claimed == 0) return "";
  const int owner = world->size() - claimed;
  constexpr int64_t kNameBytes = 512;
  std::vector<int32_t> bytes(kNameBytes, 0);
  for (size_t i = 0; i < mine.size() && i + 1 < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(mine[i]);
  Tensor name = Tensor::from_vector(bytes, {kNameBytes});
  world->broadcast(name, owner)->wait();
  std::string result;
  for (int64_t c : name.to_ints()) {
    if (c == 0) break;
    result += static_cast<char>(c);
  }
  return fmt::format("{} (on rank {})", result, owner);
}

namespace {

// A copy of a step input the recorded graph reads from (undefined stays undefined).
Tensor static_copy(const Tensor& t) { return t.defined() ? t.clone() : t; }

void refill(const Tensor& target, const Tensor& source) {
  if (!target.defined()) return;
  TITAN_CHECK(source.defined() && source.shape() == target.shape(),
              "graph capture: a step input changed shape from {} to {}; the recorded step needs the same shapes",
              shape_str(target.shape()), source.defined() ? shape_str(source.shape()) : "(none)");
  titan::copy_(target, source);
}

}  // namespace

// The first call records the device half of a step on copies of its inputs;
// every call (the first included: recording runs nothing) refills those copies
// and replays. Gradients, losses and the norm are the recording's tensors.
Trainer::StepOutputs Trainer::replay_captured_step(const StepInputs& step) {
  if (!captured_) {
    auto captured = std::make_unique<CapturedStep>();
    for (const models::DecoderInputs& in : step.inputs) {
      captured->inputs.inputs.push_back(
          {static_copy(in.input_ids), static_copy(in.positions), static_copy(in.document_ids)});
    }
    for (const Tensor& labels : step.labels) captured->inputs.labels.push_back(static_copy(labels));
    for (const Tensor& scale : step.loss_scale_tensors) captured->inputs.loss_scale_tensors.push_back(scale.clone());
    captured->recorder = make_step_recorder(device_.type);
    captured->recorder->begin();
    try {
      captured->outputs = run_device_step(captured->inputs, /*apply_update=*/true);
      captured->recorder->end();
    } catch (...) {
      captured->recorder->cancel();
      throw;
    }
    captured_ = std::move(captured);
  } else {
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      const models::DecoderInputs &target = captured_->inputs.inputs[i], &source = step.inputs[i];
      refill(target.input_ids, source.input_ids);
      refill(target.positions, source.positions);
      refill(target.document_ids, source.document_ids);
      refill(captured_->inputs.labels[i], step.labels[i]);
    }
    for (size_t i = 0; i < step.loss_scale_tensors.size(); ++i) {
      refill(captured_->inputs.loss_scale_tensors[i], step.loss_scale_tensors[i]);
    }
  }
  captured_->recorder->replay();
  return captured_->outputs;
}

// Tensor-parallel ranks each saw their part of the sequence: the gradients of
// replicated parameters (norms, embeddings) are partial sums to add up. Then
// the global norm: FSDP shards are disjoint over dp_shard, tensor-parallel
// shards over tp, while replicated parameters count once.
Tensor Trainer::synchronize_and_clip_gradients() {
  std::vector<Tensor> split, replicated;
  for (auto& [name, parameter] : model_->named_parameters()) {
    const Tensor grad = parameter->data.grad();
    if (!grad.defined()) continue;
    (parameter->tensor_parallel_dim >= 0 ? split : replicated).push_back(grad);
  }
  const auto& tp = mesh_->group("tp");
  if (tp->size() > 1 && !replicated.empty()) {
    int64_t total = 0;
    for (const Tensor& grad : replicated) total += grad.numel();
    Tensor bucket = Tensor::empty({total}, DType::f32, device_);
    int64_t offset = 0;
    for (const Tensor& grad : replicated) {
      titan::copy_(bucket.narrow(0, offset, grad.numel()).view(grad.shape()), grad);
      offset += grad.numel();
    }
    tp->all_reduce(bucket, comm::ReduceOp::sum)->wait();
    offset = 0;
    for (const Tensor& grad : replicated) {
      titan::copy_(grad, bucket.narrow(0, offset, grad.numel()).view(grad.shape()));
      offset += grad.numel();
    }
  }
  std::vector<comm::ProcessGroup*> dp_groups, split_groups;
  if (fsdp_) dp_groups.push_back(mesh_->group("dp_shard_cp").get());
  // Pipeline stages hold disjoint parameters.
  if (pipeline_) dp_groups.push_back(mesh_->group("pp").get());
  split_groups = dp_groups;
  split_groups.push_back(tp.get());
  const Tensor sum_squares = ops::add(parallel::grad_sum_squares(split, split_groups, device_),
                                      parallel::grad_sum_squares(replicated, dp_groups, device_));
  // Clipping multiplies by the factor on the device (by 1 when under the limit: exact).
  const Tensor clip = ops::clip_scalars(sum_squares, config_.training.max_norm);
  ops::scale_all_by_(split, clip, 1);
  ops::scale_all_by_(replicated, clip, 1);
  return clip;
}

double Trainer::mean_over_dp(double value) const {
  // Context-parallel ranks' slices are equal in size: the mean of their means is the mean over every token.
  const auto& dp = mesh_->group("dp_cp");
  if (dp->size() == 1) return value;
  Tensor total = Tensor::full({1}, value, DType::f32);
  dp->all_reduce(total, comm::ReduceOp::avg)->wait();
  return total.item();
}

int64_t Trainer::token_loss_scales(StepInputs& step) const {
  int64_t local = 0;
  for (int64_t count : step.label_counts) local += count;
  // Tensor- and pipeline-parallel ranks share their batch: counted over dp x cp only,
  // where context-parallel ranks hold disjoint slices of the same sequences.
  const auto& dp = mesh_->group("dp_cp");
  int64_t global = local;
  if (dp->size() > 1) {
    Tensor total = Tensor::from_vector(std::vector<int64_t>{local}, {1});
    dp->all_reduce(total, comm::ReduceOp::sum)->wait();
    global = total.to_ints()[0];
  }
  TITAN_CHECK(global > 0,
              "step {}: no label of the global batch is trained (every one is the ignore index {}): the step would "
              "learn nothing; check the data's loss masks (an SFT dataset whose samples are all prompt?)",
              step_, data::kIgnoreIndex);
  // Scaled by dp ranks / global labels: the gradients' average over the dp ranks
  // (FSDP, replicas) then sums every rank's label-weighted losses over the global
  // count. With every loss counting as many labels this is 1 / losses per rank, as before.
  std::vector<float> scales;
  for (int64_t count : step.label_counts) {
    scales.push_back(
        static_cast<float>(static_cast<double>(count) * static_cast<double>(dp->size()) / static_cast<double>(global)));
  }
  step.loss_scales = scales;
  const Tensor on_device = Tensor::from_floats(scales, {static_cast<int64_t>(scales.size())}).to(device_);
  step.loss_scale_tensors.clear();
  for (int64_t i = 0; i < on_device.numel(); ++i) step.loss_scale_tensors.push_back(on_device.select(0, i));
  return global;
}

double Trainer::validate() {
  const profiler::Span span("phase", "validation");
  autograd::NoGradGuard no_grad;
  data::ValidationIterator batches = loader_->validation();
  double weighted = 0.0;
  int64_t tokens = 0;
  data::Batch loaded;
  for (int64_t i = 0; i < config_.validation.steps && batches.next(loaded); ++i) {
    const data::Batch batch = local_batch(loaded);
    // Under pipeline parallelism the last stage's rank has the loss (and counts the tokens).
    const Tensor loss = pipeline_ ? pipeline_->evaluate(model_inputs(batch), batch.labels.to(device_))
                                  : model_->loss(model_inputs(batch), batch.labels.to(device_));
    if (!loss.defined()) continue;
    // The loss is a mean over this batch's counted labels: weight it by their number.
    weighted += loss.item() * static_cast<double>(batch.label_tokens);
    tokens += batch.label_tokens;
  }
  // Every rank's token-weighted sum and token count, summed over the data-, context-parallel (and pipeline) ranks.
  Tensor totals =
      Tensor::from_vector(std::vector<float>{static_cast<float>(weighted), static_cast<float>(tokens)}, {2});
  if (mesh_->size("pp") > 1) mesh_->group("pp")->all_reduce(totals, comm::ReduceOp::sum)->wait();
  if (mesh_->size("dp_cp") > 1) mesh_->group("dp_cp")->all_reduce(totals, comm::ReduceOp::sum)->wait();
  const std::vector<float> summed = totals.to_floats();
  TITAN_CHECK(summed[1] > 0, "validation: the held-out split is empty (raise validation.split?)");
  return summed[0] / summed[1];
}

const std::vector<StepMetrics>& Trainer::train() {
  PreemptionWatcher preemption;
  if (config_.checkpoint.create_seed_checkpoint) {
    TITAN_CHECK(mesh_->size("world") == 1,
                "checkpoint.create_seed_checkpoint runs in one process (it writes the "
                "initial full weights every later run loads), not {}",
                mesh_->size("world"));
    TITAN_CHECK(step_ == 0, "checkpoint.create_seed_checkpoint: this job already has checkpoints (resumed at step {})",
                step_);
    std::vector<StateTensor> model_only;
    for (StateTensor& t : state_tensors()) {
      if (t.part == "model") model_only.push_back(std::move(t));
    }
    checkpointer_->save(0, model_only, job_state({"model"}), rank_state(), /*async=*/false);
    return history_;
  }
  const bool saving = config_.checkpoint.enable;
  if (step_ >= config_.training.steps && rank_ == 0) {
    std::printf(
        "titan: resumed at step %lld of training.steps = %lld: nothing left to train (raise "
        "--training.steps to go on)\n",
        static_cast<long long>(step_), static_cast<long long>(config_.training.steps));
  }
  // Each stretch of the loop is timed from the end of the one before, so goodput's parts cover the wall time.
  auto mark = Clock::now();
  const auto lap = [&mark] {
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - mark).count();
    mark = now;
    return seconds;
  };
  goodput_.startup_seconds += std::chrono::duration<double>(mark - job_start_).count();
  double checkpoint_stall = 0.0;  // of the save after the previous step
  while (step_ < config_.training.steps) {
    step_profiler_->begin_step(step_ + 1);
    StepMetrics metrics = train_step();
    const double step_seconds = lap();
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
    const bool stop = checkpointer_->end_of_step(preemption.requested(step_, rank_));
    const bool last = step_ == config_.training.steps;
    // The step's record is written before its checkpoint save starts, so a
    // save killed midway loses no record; the time the save holds the run up
    // is reported by the next step's record.
    metrics.checkpoint_stall_seconds = checkpoint_stall;
    checkpoint_stall = 0.0;
    history_.push_back(metrics);
    const bool log = step_ % config_.metrics.log_freq == 0 || last || metrics.validation_loss || stop;
    if (log && logger_) logger_->log(metrics);
    goodput_.other_seconds += lap();
    if (saving && !last && (step_ % config_.checkpoint.interval == 0 || stop)) {
      const profiler::Span span("phase", "checkpoint");
      checkpoint_stall = save_checkpoint(config_.checkpoint.async_mode == "async");
    }
    goodput_.checkpoint_seconds += lap();
    step_profiler_->end_step(step_);
    goodput_.other_seconds += lap();
    if (stop && !last) {
      checkpointer_->wait();
      goodput_.checkpoint_seconds += lap();
      report_goodput();
      stopped_by_signal_ = true;
      if (rank_ == 0) {
        std::printf("titan: stopping after step %lld on a signal%s\n", static_cast<long long>(step_),
                    saving ? " (checkpoint saved; the next run resumes from it)" : " (checkpoints are off: not saved)");
        std::fflush(stdout);
      }
      return history_;
    }
  }
  {
    const profiler::Span span("phase", "checkpoint");
    finish();
  }
  goodput_.checkpoint_seconds += lap();
  report_goodput();
  return history_;
}

void Trainer::report_goodput() {
  if (rank_ != 0) return;
  std::printf("%s\n", goodput_.summary_line().c_str());
  std::fflush(stdout);
  if (logger_) logger_->log_record({{"goodput", goodput_.to_json()}});
}

}  // namespace titan::train
