#include "titan/train/job_model.h"

#include "titan/train/activation_budget.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>

#include "titan/models/decoder_size.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/hf/hf_weights.h"
#include "titan/models/lora_plan.h"
#include "titan/models/model_spec.h"
#include "titan/train/config_loader.h"
#include "titan/train/dcp_convert.h"
#include "titan/train/job_model_config.h"
#include "titan/train/job_setup.h"
#include "titan/train/memory_check.h"
#include "titan/train/model_export.h"
#include "titan/train/pipeline_plan.h"

namespace titan::train {

using comm::MeshDim;

namespace {

// Weights named by checkpoint.initial_load_path that are not a training
// checkpoint (those the checkpointer restores): an HF folder, a titan export or
// a PyTorch DCP folder.
void load_initial_weights(const JobConfig& config, models::Decoder& model) {
  const std::string& path = config.checkpoint.initial_load_path;
  if (models::is_hf_model_folder(path)) {
    models::load_hf_weights_into(model, path);
  } else if (is_model_export_folder(path)) {
    load_exported_weights_into(model, path);
  } else if (checkpoint::is_dcp_folder(path)) {
    load_dcp_weights_into(model, path);  // a PyTorch Distributed Checkpoint (TorchTitan's step folder)
  }
}

}  // namespace

namespace {

// The model.converters entry starting with `prefix` (validation allows one of each kind), or "".
std::string converter_named(const JobConfig& config, std::string_view prefix) {
  for (const std::string& converter : config.model.converters) {
    if (converter.starts_with(prefix)) return converter;
  }
  return "";
}

}  // namespace

std::optional<models::Float8Options> float8_options(const JobConfig& config) {
  const std::string converter = converter_named(config, "quantize.linear.");
  if (converter.empty()) return std::nullopt;
  const QuantizeSection& q = config.quantize;
  if (converter == "quantize.linear.mx") return models::Float8Options{converter, q.mx_recipe_name, q.mx_filter_fqns};
  return models::Float8Options{converter, q.float8_recipe_name.empty() ? "tensorwise" : q.float8_recipe_name,
                               q.float8_filter_fqns, q.float8_fsdp_all_gather, q.float8_emulate};
}

std::optional<models::Float8GroupedOptions> float8_grouped_options(const JobConfig& config) {
  const std::string converter = converter_named(config, "quantize.grouped_mm.");
  if (converter.empty()) return std::nullopt;
  const QuantizeSection& q = config.quantize;
  if (converter == "quantize.grouped_mm.mx")
    return models::Float8GroupedOptions{converter, q.grouped_mx_recipe_name, q.grouped_mx_fqns};
  return models::Float8GroupedOptions{converter, "", q.grouped_float8_fqns};
}

std::string float8_summary(const JobConfig& config, size_t linears, size_t experts, DType compute_dtype) {
  std::string lines;
  if (const auto grouped = float8_grouped_options(config)) {
    lines += fmt::format(
        "titan: {} ({}) on {} MoE experts module(s) matching [{}]\n", grouped->converter,
        grouped->converter == "quantize.grouped_mm.mx" ? "mxfp8, RCEIL scales" : "rowwise, power-of-two scales",
        experts, fmt::join(grouped->fqns, ", "));
  }
  const auto float8 = float8_options(config);
  if (!float8) return lines;
  const char* weights = !float8->fsdp_float8_all_gather ? ""
                        : config.quantize.float8_precompute_scale
                            ? "; their weights cast to float8 from the f32 master, scales precomputed once per step"
                            : "; their weights cast to float8 from the f32 master";
  return lines + fmt::format("titan: {} ({}) on {} Linear(s){}; the rest stay in {}\n", float8->converter,
                             float8->recipe_name, linears, weights, dtype_name(compute_dtype));
}

JobModel build_job_model(JobConfig& config, const comm::DeviceMesh& mesh, Device device, int64_t tokenizer_vocab,
                         Generator& generator, ModelStart start) {
  // A Hugging Face config.json fixes the vocabulary (its embedding rows); otherwise the tokenizer sizes it.
  const bool from_hf = !config.model.hf_config.empty();
  const int64_t requested_vocab =
      config.model.vocab_size > 0 ? config.model.vocab_size : (from_hf ? 0 : tokenizer_vocab);
  TITAN_CHECK(from_hf || requested_vocab > 0, "model.vocab_size is not set and there is no tokenizer to take it from");
  const models::DecoderConfig model_config = resolve_model_config(config, requested_vocab);
  TITAN_CHECK(model_config.vocab_size >= tokenizer_vocab, "model.vocab_size {} is smaller than the tokenizer's {} ids",
              model_config.vocab_size, tokenizer_vocab);
  const models::ModelSpec& spec = models::model_spec(config.model.name);
  const std::string budget_plan = resolve_activation_memory_budget(config, model_config, mesh.dims(), device);
  if (!budget_plan.empty() && reports_for_job(config, mesh)) std::printf("titan: %s\n", budget_plan.c_str());
  const MemoryBudget memory = check_job_fits_memory(config, model_config, mesh.dims(), device);
  if (reports_for_job(config, mesh)) std::printf("titan: memory: this job %s\n", memory.summary().c_str());

  JobModel job;
  // A pipeline rank's own need (its stages, its micro-batches in flight), beside the fullest rank's checked above.
  job.memory_needed_bytes = mesh.dims().pp > 1 ? job_memory_budget(config, model_config, mesh.dims(), device,
                                                                   mesh.coordinate(comm::MeshDim::pp))
                                                     .needed_bytes
                                               : memory.needed_bytes;
  generator = Generator(static_cast<uint64_t>(config.training.seed));
  // The model is built on the meta device (shapes, no storage), the plan
  // below cuts it to this rank's shards, and only those get storage, are drawn
  // from the seed by name and, from checkpoint.initial_load_path, read from
  // just their bytes. (ModelStart::whole_then_shards, kept for `titan bench
  // startup`, builds, draws and loads the whole model first.)
  const bool whole_first = start == ModelStart::whole_then_shards;
  job.model = spec.build(model_config, whole_first ? device : Device::meta());
  if (whole_first) {
    job.model->init_weights(generator);
    load_initial_weights(config, *job.model);
  }
  // LoRA: adapters on the loaded base weights, which freeze (before any split, so every parallelism sees them).
  if (config.lora.enable) {
    const LoraSection& l = config.lora;
    models::apply_lora(*job.model, {l.rank, l.alpha, l.dropout, l.target_modules}, generator, &generator);
    for (auto& [name, parameter] : job.model->named_parameters()) {
      if (parameter->data.requires_grad()) job.lora_parameters += parameter->data.numel();
    }
  }
  // Float8 / MXFP8 (TorchTitan's model converters): recipes on the filtered Linears, before any split.
  const auto float8 = float8_options(config);
  if (float8) job.float8_linears = models::apply_float8(*job.model, *float8);
  const auto float8_grouped = float8_grouped_options(config);
  if (float8_grouped) job.float8_experts = models::apply_float8_grouped(*job.model, *float8_grouped);
  // Pipeline stages keep their parts of the same initial weights.
  const bool pipelined = mesh.size(MeshDim::pp) > 1;
  if (pipelined) {
    models::PipelinePlacement placement = plan_pipeline(config, spec, job.model->config, mesh.coordinate(MeshDim::pp));
    job.pipeline_micro_batches = pipeline_microbatches(config);
    job.pipeline_parts = placement.parts;
    job.model->retain_modules(placement.held_modules());
    job.pipeline = std::make_unique<PipelineRunner>(*job.model, job.pipeline_parts, std::move(placement.schedule),
                                                    mesh.group(MeshDim::pp));
    if (is_rehearsal(config)) {
      job.pipeline->rehearse_boundaries(mesh.size(MeshDim::tp), job.model->config.dim(),
                                        parse_dtype(config.training.mixed_precision_param));
    }
  }
  job.compute_dtype = parse_dtype(config.training.mixed_precision_param);
  models::ParallelizeOptions options;
  options.param_dtype = job.compute_dtype;
  options.activation_checkpoint = parallel::parse_activation_checkpoint_mode(config.activation_checkpoint.mode);
  options.selective_every = config.activation_checkpoint.selective_every;
  options.selective_ops = {config.activation_checkpoint.selective_ops,
                           config.activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns};
  options.reshard_after_forward = parallel::parse_reshard_policy(config.parallelism.fsdp_reshard_after_forward);
  options.context_parallel_rotate = parallel::parse_rotate_method(config.parallelism.context_parallel_rotate_method);
  options.context_parallel_load_balance =
      parallel::parse_load_balancer(config.parallelism.context_parallel_load_balancer);
  options.pipelined = pipelined;
  options.device = device;
  // As TorchTitan: the scales are precomputed only for the float8 all-gather.
  options.precompute_float8_scales =
      float8 && float8->fsdp_float8_all_gather && config.quantize.float8_precompute_scale;
  job.parallelized = std::make_unique<parallel::ParallelizedModel>(spec.parallelize(*job.model, mesh, options));
  if (job.pipeline)
    job.pipeline->before_each_forward([parallelized = job.parallelized.get()] { parallelized->begin_micro_batch(); });
  if (!whole_first) {
    job.model->materialize(device);
    job.model->init_weights(generator);
    load_initial_weights(config, *job.model);
  }

  job.parameters = models::parameter_count(model_config);
  job.flops_per_token = spec.flops_per_token(model_config, config.training.seq_len);
  if (config.lora.enable) {
    // The 6 FLOPs per weight per token are 2 forward, 2 for the input gradient and
    // 2 for the weight gradient, which frozen base weights skip; the adapters
    // cost the full 6. (Counted before any sharding: whole-model numbers.)
    const double base_matrices = static_cast<double>(models::active_parameter_count(model_config) -
                                                     model_config.vocab_size * model_config.dim());
    job.flops_per_token += -2.0 * base_matrices + 6.0 * static_cast<double>(job.lora_parameters);
  }
  return job;
}

}  // namespace titan::train
