#include "titan/train/flux/flux_trainer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/comm/process_group.h"
#include "titan/core/copy.h"
#include "titan/core/units.h"
#include "titan/data/image_file.h"
#include "titan/data/image_tensor.h"
#include "titan/models/flux/flow_matching.h"
#include "titan/models/flux/flux_diffusers_config.h"
#include "titan/models/flux/parallelize_flux.h"
#include "titan/nn/functional.h"
#include "titan/ops/cpu/isa.h"
#include "titan/ops/random.h"
#include "titan/train/config_loader.h"
#include "titan/train/device_peak.h"
#include "titan/train/flux/flux_sampler.h"
#include "titan/train/job_model.h"
#include "titan/train/job_setup.h"
#include "titan/train/preemption.h"
#include "titan/train/training_state.h"

namespace titan::train::flux {
namespace {

using Clock = SteadyClock;
using comm::MeshDim;
using models::flux::FluxConfig;

// The 8 stratified validation timesteps (TorchTitan's): the midpoints of eighths of [0, 1].
constexpr int64_t kValidationTimesteps = 8;
double validation_timestep(int64_t index) {
  return (static_cast<double>(index % kValidationTimesteps) + 0.5) / kValidationTimesteps;
}

// Validation noise comes from its own seed, the same at every evaluation.
constexpr uint64_t kValidationSeedOffset = 0x5eed;

// The Philox stream of example `index` (of `numel` latent values): its noise,
// then its timestep and two caption-dropout coins, each example its own
// stretch of blocks.
Generator example_generator(uint64_t seed, int64_t index, int64_t numel) {
  Generator generator(seed);
  const auto blocks = static_cast<uint64_t>((numel + 3) / 4 + 8);
  generator.reserve(static_cast<uint64_t>(index) * blocks);
  return generator;
}

// The transformer for `data`'s encodings; rank 0 says when the widths differ from the flavor's.
FluxConfig job_flux_config(const JobConfig& config, const FluxData& data, bool reports) {
  TITAN_CHECK(
      data.empty_t5.defined() && data.empty_t5.dim() == 2 && data.empty_clip.defined() && data.empty_clip.dim() == 1,
      "flux: the data must give the empty prompt's T5 [Lt, d] and CLIP [d] encodings");
  const FluxConfig flux = job_transformer_config(config, data.empty_t5.size(1), data.empty_clip.size(0));
  if (reports && config.model.hf_config.empty()) {
    const FluxConfig flavor = models::flux::flux_flavor(config.model.flavor);
    if (flavor.context_in_dim != flux.context_in_dim || flavor.vec_in_dim != flux.vec_in_dim) {
      std::printf(
          "titan: note: flux %s: text widths follow the encoders: T5 %lld (flavor %lld), CLIP %lld (flavor %lld)\n",
          config.model.flavor.c_str(), static_cast<long long>(flux.context_in_dim),
          static_cast<long long>(flavor.context_in_dim), static_cast<long long>(flux.vec_in_dim),
          static_cast<long long>(flavor.vec_in_dim));
    }
  }
  return flux;
}

// Checks on the flux keys of a job config (names the key at fault).
void validate_flux_keys(const JobConfig& config) {
  const TrainingSection& t = config.training;
  TITAN_CHECK(t.classifier_free_guidance_prob >= 0.0 && t.classifier_free_guidance_prob <= 1.0,
              "training.classifier_free_guidance_prob must be in [0, 1], got {}", t.classifier_free_guidance_prob);
  TITAN_CHECK(t.timestep_sampling == "logit_normal" || t.timestep_sampling == "uniform",
              "training.timestep_sampling '{}' is not one of logit_normal, uniform", t.timestep_sampling);
  TITAN_CHECK(t.img_size > 0 && t.img_size % 16 == 0,
              "training.img_size must be a positive multiple of 16 (8x the autoencoder, 2x the patches), got {}",
              t.img_size);
  TITAN_CHECK(config.parallelism.pipeline_parallel_degree == 1 && config.parallelism.tensor_parallel_degree == 1,
              "flux: pipeline and tensor parallelism are not built for FLUX (parallelism.pipeline_parallel_degree "
              "{}, tensor_parallel_degree {}); use FSDP/HSDP",
              config.parallelism.pipeline_parallel_degree, config.parallelism.tensor_parallel_degree);
  TITAN_CHECK(!config.training.graph_capture, "flux: training.graph_capture is not built for FLUX");
  TITAN_CHECK(!config.lora.enable, "flux: LoRA (lora.enable) is not built for FLUX");
}

}  // namespace

FluxConfig job_transformer_config(const JobConfig& config, int64_t t5_width, int64_t clip_width) {
  // model.hf_config: a Diffusers transformer config.json sets every size instead of the flavor.
  FluxConfig flux = config.model.hf_config.empty() ? models::flux::flux_flavor(config.model.flavor)
                                                   : models::flux::read_diffusers_flux_config(config.model.hf_config);
  flux.context_in_dim = t5_width;
  flux.vec_in_dim = clip_width;
  flux.validate();
  return flux;
}

FluxTrainer::FluxTrainer(JobConfig config, const FluxDataFactory& make_data) : config_(std::move(config)) {
  train::validate(config_);
  validate_flux_keys(config_);
  device_ = training_device(config_);
  mesh_ = build_device_mesh(config_, device_);
  data_ = make_data(*mesh_);
  TITAN_CHECK(data_.train != nullptr, "flux: the job has no training batches");
  reports_ = reports_for_job(config_, *mesh_);
  if (reports_) {
    for (const std::string& notice : config_.notices) std::printf("titan: note: %s\n", notice.c_str());
    dump_folder_lock_ = std::make_unique<DumpFolderLock>(config_.job.dump_folder);
    std::filesystem::create_directories(config_.job.dump_folder);
  }
  micro_batches_ = micro_batches_per_step(config_, *mesh_);
  tokens_ = TokenSlice{mesh_->coordinate(MeshDim::cp), mesh_->size(MeshDim::cp)};
  tokens_.check(data_.empty_t5.size(0), (config_.training.img_size / 16) * (config_.training.img_size / 16));
  compute_dtype_ = parse_dtype(config_.training.mixed_precision_param);
  TITAN_CHECK(compute_dtype_ == DType::f32 || compute_dtype_ == DType::bf16,
              "training.mixed_precision_param must be f32 or bf16 for flux, got {}",
              config_.training.mixed_precision_param);

  // The whole model, drawn from the seed by name on every rank, then cut into
  // this rank's shards: every layout starts from the same weights.
  model_ = std::make_shared<models::flux::FluxModel>(job_flux_config(config_, data_, reports_), device_);
  model_->init_weights(Generator(static_cast<uint64_t>(config_.training.seed)));
  for (const Tensor& parameter : model_->parameters()) parameters_ += parameter.numel();
  // model.converters, as TorchTitan applies them to every model before parallelizing (FLUX has no MoE experts,
  // so a quantize.grouped_mm.* converter is refused there, naming its fqns key).
  const auto float8 = float8_options(config_);
  if (float8) float8_linears_ = models::apply_float8(*model_, *float8).size();
  if (const auto grouped = float8_grouped_options(config_)) models::apply_float8_grouped(*model_, *grouped);
  models::ParallelizeOptions options;
  options.param_dtype = compute_dtype_;
  options.activation_checkpoint = parallel::parse_activation_checkpoint_mode(config_.activation_checkpoint.mode);
  options.selective_every = config_.activation_checkpoint.selective_every;
  options.selective_ops.enabled = config_.activation_checkpoint.selective_ops;
  options.reshard_after_forward = parallel::parse_reshard_policy(config_.parallelism.fsdp_reshard_after_forward);
  options.device = device_;
  options.precompute_float8_scales =
      float8 && float8->fsdp_float8_all_gather && config_.quantize.float8_precompute_scale;
  parallelized_ =
      std::make_unique<parallel::ParallelizedModel>(models::flux::parallelize_flux(*model_, *mesh_, options));

  optimizer_ = build_optimizer(config_.optimizer, *model_);
  schedule_ = build_lr_schedule(config_, reports_);
  double peak_tflops = config_.metrics.peak_tflops;
  if (peak_tflops <= 0) {
    mesh_->group(MeshDim::world)->barrier();
    peak_tflops = default_peak_tflops(device_, compute_dtype_);
  }
  const FluxBatch probe_shape{Tensor(), data_.empty_t5, data_.empty_clip};
  const int64_t side = config_.training.img_size / 8;  // the autoencoder's latent side
  const double flops_per_example = flux_training_flops(model_->config, probe_shape.t5.size(0), (side / 2) * (side / 2));
  // Tokens, as TorchTitan counts FLUX's: image patches plus text tokens of each example.
  const int64_t tokens_per_example = probe_shape.t5.size(0) + (side / 2) * (side / 2);
  meter_ = std::make_unique<StepMeter>(*mesh_, device_, flops_per_example / static_cast<double>(tokens_per_example),
                                       peak_tflops, *parallelized_, /*pipelined=*/false);
  checkpointer_ = std::make_unique<Checkpointer>(config_, *mesh_);
  resume();
  if (!reports_) return;
  const std::filesystem::path dump_folder(config_.job.dump_folder);
  logger_ = std::make_unique<MetricsLogger>(
      (dump_folder / "metrics.jsonl").string(), config_.metrics.progress, config_.metrics.stop_on_write_error,
      config_.metrics.enable_tensorboard ? (dump_folder / config_.metrics.save_tb_folder).string() : std::string());
  print_banner();
}

FluxTrainer::~FluxTrainer() = default;

void FluxTrainer::print_banner() const {
  const comm::ParallelDims& dims = mesh_->dims();
  std::printf(
      "titan: flux %s, %lld parameters, %lldx%lld images (%lld image + %lld text tokens), batch %lld per rank "
      "(x%lld accumulation), %s compute, %s, %.2f TFLOP/s peak, %d rank(s): dp_replicate %lld x dp_shard %lld x cp "
      "%lld\n",
      config_.model.hf_config.empty() ? config_.model.flavor.c_str() : config_.model.hf_config.c_str(),
      static_cast<long long>(parameters_), static_cast<long long>(config_.training.img_size),
      static_cast<long long>(config_.training.img_size),
      static_cast<long long>((config_.training.img_size / 16) * (config_.training.img_size / 16)),
      static_cast<long long>(data_.empty_t5.size(0)), static_cast<long long>(config_.training.local_batch_size),
      static_cast<long long>(micro_batches_), dtype_name(compute_dtype_),
      device_.is_cpu() ? fmt::format("CPU kernels {}", ops::cpu::selected_isa()).c_str() : device_.str().c_str(),
      meter_->peak_tflops(), mesh_->size(MeshDim::world), static_cast<long long>(dims.dp_replicate),
      static_cast<long long>(dims.dp_shard), static_cast<long long>(dims.cp));
  std::fputs(float8_summary(config_, float8_linears_, 0, compute_dtype_).c_str(), stdout);
  std::fflush(stdout);
}

std::pair<Tensor, Tensor> FluxTrainer::training_draws(FluxBatch& batch) const {
  const int64_t b = batch.size();
  const int64_t image_tokens = (batch.latents.size(2) / 2) * (batch.latents.size(3) / 2);
  const double mu = models::flux::shift_mu(image_tokens);
  const double p = config_.training.classifier_free_guidance_prob;
  const Tensor noise = Tensor::empty(batch.latents.shape());
  std::vector<float> t(static_cast<size_t>(b));
  batch.t5 = batch.t5.contiguous().clone();
  batch.clip = batch.clip.contiguous().clone();
  for (int64_t i = 0; i < b; ++i) {
    Generator draws = example_generator(static_cast<uint64_t>(config_.training.seed), batch.first_example + i,
                                        batch.latents.numel() / b);
    ops::normal_(noise.narrow(0, i, 1), 0.0, 1.0, draws);
    if (config_.training.timestep_sampling == "uniform") {
      const Tensor u = Tensor::empty({1});
      ops::uniform_(u, 0.0, 1.0, draws);
      t[static_cast<size_t>(i)] = u.to_floats()[0];
    } else {
      t[static_cast<size_t>(i)] = models::flux::sample_timesteps(1, 0.0, 1.0, mu, draws).to_floats()[0];
    }
    const Tensor coins = Tensor::empty({2});
    ops::uniform_(coins, 0.0, 1.0, draws);
    const std::vector<float> u = coins.to_floats();
    if (u[0] < p) copy_(batch.t5.narrow(0, i, 1), data_.empty_t5.unsqueeze(0));
    if (u[1] < p) copy_(batch.clip.narrow(0, i, 1), data_.empty_clip.unsqueeze(0));
  }
  return {noise, Tensor::from_floats(t, {b})};
}

StepMetrics FluxTrainer::train_step() {
  const auto start = Clock::now();
  ++step_;
  meter_->begin();
  const double lr = config_.optimizer.lr * schedule_.factor(step_);
  optimizer_->prepare(lr);
  model_->zero_grad();
  double loss_sum = 0.0, data_seconds = 0.0;
  int64_t tokens = 0, image_tokens_seen = 0;
  for (int64_t micro = 0; micro < micro_batches_; ++micro) {
    const auto data_start = Clock::now();
    FluxBatch batch = data_.train();
    data_seconds += seconds_since(data_start);
    const int64_t image_tokens = (batch.latents.size(2) / 2) * (batch.latents.size(3) / 2);
    const auto [noise, t] = training_draws(batch);
    const Tensor loss = flow_matching_loss(*model_, batch, noise, t, compute_dtype_, tokens_);
    loss_sum += loss.item();
    autograd::backward({F::scale(loss, 1.0f / static_cast<float>(micro_batches_))});
    parallelized_->finish_backward(micro + 1 == micro_batches_);
    // This rank's tokens: a context-parallel rank computes on its slice.
    tokens += batch.size() * (image_tokens + batch.t5.size(1)) / tokens_.ranks;
    image_tokens_seen += batch.size() * image_tokens / tokens_.ranks;
  }
  const std::vector<float> clip =
      parallelized_->synchronize_and_clip_gradients(*model_, config_.training.max_norm, device_).to_floats();
  StepMetrics m;
  m.step = step_;
  m.total_steps = config_.training.steps;
  m.loss = comm::all_reduce_scalar(*mesh_->group(MeshDim::dp_cp), loss_sum / static_cast<double>(micro_batches_),
                                   comm::ReduceOp::avg);
  m.grad_norm = clip[0];
  // The loss counts every image token's velocity, over the global batch.
  m.trained_tokens = static_cast<int64_t>(comm::all_reduce_scalar(
      *mesh_->group(MeshDim::dp_cp), static_cast<double>(image_tokens_seen), comm::ReduceOp::sum));
  TITAN_CHECK(std::isfinite(m.loss) && std::isfinite(m.grad_norm),
              "flux: step {} has a non-finite loss ({}) or gradient norm ({})", step_, m.loss, m.grad_norm);
  optimizer_->apply();
  parallelized_->after_optimizer_step();  // FSDP's precomputed float8 scales, when asked for
  m.lr = lr;
  m.data_seconds = data_seconds;
  m.host_seconds = seconds_since(start);
  meter_->finish(m, tokens, seconds_since(start), 0.0, 0.0);
  return m;
}

double FluxTrainer::validate() {
  if (!data_.reset_validation) return std::nan("");
  const autograd::NoGradGuard no_grad;
  data_.reset_validation();
  double sum = 0.0;
  int64_t counted = 0;
  for (int64_t i = 0; i < config_.validation.steps; ++i) {
    FluxBatch batch = data_.validation();
    if (!batch.latents.defined()) break;  // the split is exhausted
    const int64_t repeats = config_.validation.all_timesteps ? kValidationTimesteps : 1;
    for (int64_t r = 0; r < repeats; ++r) {
      std::vector<float> t(static_cast<size_t>(batch.size()));
      for (size_t j = 0; j < t.size(); ++j) {
        t[j] = static_cast<float>(
            validation_timestep(config_.validation.all_timesteps ? r : batch.first_example + static_cast<int64_t>(j)));
      }
      const Tensor noise = Tensor::empty(batch.latents.shape());
      for (int64_t j = 0; j < batch.size(); ++j) {
        Generator draws =
            example_generator(static_cast<uint64_t>(config_.training.seed) + kValidationSeedOffset,
                              (batch.first_example + j) * repeats + r, batch.latents.numel() / batch.size());
        ops::normal_(noise.narrow(0, j, 1), 0.0, 1.0, draws);
      }
      const Tensor loss =
          flow_matching_loss(*model_, batch, noise, Tensor::from_floats(t, {batch.size()}), compute_dtype_, tokens_);
      sum += loss.item() * static_cast<double>(batch.size());
      counted += batch.size();
    }
  }
  comm::ProcessGroup& dp = *mesh_->group(MeshDim::dp_cp);
  const double total = comm::all_reduce_scalar(dp, sum, comm::ReduceOp::sum);
  const double count = comm::all_reduce_scalar(dp, static_cast<double>(counted), comm::ReduceOp::sum);
  return count > 0 ? total / count : std::nan("");
}

void FluxTrainer::save_validation_images() {
  const FluxBatch& prompts = data_.image_prompts;
  const int64_t available = prompts.latents.defined() ? prompts.size() : 0;
  const int64_t count =
      config_.validation.save_img_count < 0 ? available : std::min(available, config_.validation.save_img_count);
  if (count == 0 || !data_.decode) return;
  SamplingOptions options;
  options.steps = config_.validation.denoising_steps;
  options.guidance = config_.validation.enable_classifier_free_guidance;
  options.guidance_scale = config_.validation.classifier_free_guidance_scale;
  options.seed = static_cast<uint64_t>(config_.training.seed) + kValidationSeedOffset;
  options.dtype = compute_dtype_;
  // Sampling runs the whole sequence on every rank: the plain attention kernel, not the ring.
  const nn::AttentionCore ring = model_->attention_core();
  model_->set_attention_core(nullptr);
  const Tensor latents =
      sample_latents(*model_, prompts.t5.narrow(0, 0, count), prompts.clip.narrow(0, 0, count), data_.empty_t5,
                     data_.empty_clip, prompts.latents.size(2), prompts.latents.size(3), options);
  model_->set_attention_core(ring);
  if (!reports_) return;
  const Tensor images = data_.decode(latents);
  const std::filesystem::path folder = std::filesystem::path(config_.job.dump_folder) /
                                       config_.validation.save_img_folder / checkpoint::step_folder_name(step_);
  std::filesystem::create_directories(folder);
  for (int64_t i = 0; i < count; ++i) {
    const data::RgbImage image =
        data::tensor_to_image(images.narrow(0, i, 1).view({3, images.size(2), images.size(3)}), "validation image");
    data::write_png(folder / fmt::format("image_{}.png", i), image);
    if (logger_) {
      logger_->log_image(step_, fmt::format("validation/image_{}", i), image.height, image.width,
                         data::encode_png(image, "validation image"));
    }
  }
  std::printf("titan: validation images for step %lld in %s (first: \"%s\")\n", static_cast<long long>(step_),
              folder.c_str(), data_.image_captions.empty() ? "" : data_.image_captions.front().c_str());
}

void FluxTrainer::save_checkpoint() {
  const nlohmann::json state = {{"contents", {"model", "optimizer", "train_state"}},
                                {"train_state", {{"step", step_}}},
                                {"optimizer", {{"steps_taken", optimizer_->steps_taken()}}}};
  checkpointer_->save(step_, state_tensors_of(*model_, *optimizer_, *mesh_), state, nlohmann::json::object(),
                      config_.checkpoint.async_mode == "async");
}

void FluxTrainer::resume() {
  if (!config_.checkpoint.enable) return;
  const checkpoint::CheckpointScan scan = checkpoint::scan_checkpoints(checkpointer_->root());
  if (scan.complete.empty()) return;
  const int64_t newest = config_.checkpoint.load_step > 0 ? config_.checkpoint.load_step : scan.complete.back();
  const std::string folder =
      (std::filesystem::path(checkpointer_->root()) / checkpoint::step_folder_name(newest)).string();
  const Checkpointer::Loaded loaded =
      Checkpointer::load(folder, state_tensors_of(*model_, *optimizer_, *mesh_), {"model", "optimizer", "train_state"});
  step_ = loaded.state.at("train_state").at("step").get<int64_t>();
  optimizer_->set_steps_taken(loaded.state.at("optimizer").at("steps_taken").get<int64_t>());
  if (data_.seek_train) data_.seek_train(step_ * micro_batches_);
  if (reports_) std::printf("titan: resumed flux from %s (step %lld)\n", folder.c_str(), static_cast<long long>(step_));
}

const std::vector<StepMetrics>& FluxTrainer::train() {
  PreemptionWatcher preemption;
  const CheckpointSection& checkpointing = config_.checkpoint;
  const bool saving = checkpointing.enable && !checkpointing.load_only;
  const int rank = mesh_->coordinate(MeshDim::world);
  while (step_ < config_.training.steps) {
    StepMetrics metrics = train_step();
    if (config_.validation.enable && step_ % config_.validation.freq == 0) {
      metrics.validation_loss = validate();
      save_validation_images();
    }
    const bool stop = checkpointer_->end_of_step(preemption.requested(step_, rank));
    const bool last = step_ == config_.training.steps;
    history_.push_back(metrics);
    const bool log = step_ % config_.metrics.log_freq == 0 || last || metrics.validation_loss || stop;
    if (log && logger_) logger_->log(metrics);
    if (saving && (step_ % checkpointing.interval == 0 || last || stop)) save_checkpoint();
    if (stop && !last) break;
  }
  checkpointer_->wait();
  return history_;
}

}  // namespace titan::train::flux
