#include "titan/train/torchtitan_keys.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "titan/core/error.h"
#include "titan/train/job_config.h"

namespace titan::train {

namespace {

using enum TorchTitanKeyUse;

constexpr const char* kNoProfilerWindow = "titan's profiler records every profile_freq-th step whole";
constexpr const char* kInProcessLoader = "titan's loader reads prepared token shards inside the training process";
constexpr const char* kNoPerOpRecompute =
    "titan recomputes a checkpointed block whole (per-op recomputation is not built)";
constexpr const char* kNotExposed = "titan does not expose this choice";
constexpr const char* kNoCompile =
    "titan runs its own compiled kernels; there is no torch.compile (training.graph_capture replays whole steps on "
    "CUDA)";
constexpr const char* kNoLowPrecision =
    "read only by a float8 or MX entry of model.converters, which is refused: low-precision training is not built";
constexpr const char* kNoTorchft = "fault-tolerant replica groups (torchft) are not built";
constexpr const char* kValidationShape = "validation uses training.local_batch_size and training.seq_len";

std::vector<TorchTitanKey> make_table() {
  return {
      {"job.config_file", no_effect, "", "titan train --config FILE names the file"},
      {"job.print_config", no_effect, "false", "titan train --print-config prints the merged config (and exits)"},
      {"job.save_config_file", no_effect, "",
       "titan writes the merged config as job.toml into every checkpoint and export"},
      {"job.custom_config_module", refused, "", "a Python module cannot extend titan's config"},
      {"profiling.profiler_active", no_effect, "1", kNoProfilerWindow},
      {"profiling.profiler_warmup", no_effect, "3", kNoProfilerWindow},
      {"metrics.disable_color_printing", no_effect, "false", "titan's metrics line has no colour codes"},
      {"metrics.save_for_all_ranks", no_effect, "false",
       "rank 0 writes metrics.jsonl, with every pipeline and context rank's bubble and peak memory as arrays"},
      {"metrics.enable_wandb", refused, "false",
       "Weights & Biases needs a network service; metrics.enable_tensorboard writes the same scalars locally"},
      {"model.hf_assets_path", mapped, "./tests/assets/tokenizer",
       "its tokenizer.json becomes model.tokenizer_path (unless that is set), and it is the Hugging Face folder "
       "checkpoint.initial_load_in_hf loads"},
      {"model.converters", refused, "", "float8 and MX training (quantize.*) are not built yet"},
      {"model.print_after_conversion", no_effect, "false", "no model converter runs"},
      {"optimizer.implementation", no_effect, "fused",
       "titan's AdamW has one vectorised implementation; PyTorch's for-loop, foreach and fused compute the same "
       "update"},
      {"optimizer.early_step_in_backward", refused, "false",
       "titan steps the optimizer after the backward and its gradient clipping"},
      {"training.enable_cpu_offload", refused, "false", "offloading parameters and optimizer state is not built"},
      {"training.dtype", refused, "float32",
       "training without f32 master weights is not built; training.mixed_precision_param = \"bfloat16\" computes in "
       "bf16 over f32 master weights"},
      {"training.gc_freq", no_effect, "50", "titan has no garbage collector to run"},
      {"training.gc_debug", no_effect, "false", "titan has no garbage collector to run"},
      {"training.dataloader.num_workers", no_effect, "0", kInProcessLoader},
      {"training.dataloader.persistent_workers", no_effect, "false", kInProcessLoader},
      {"training.dataloader.pin_memory", no_effect, "false", kInProcessLoader},
      {"training.dataloader.prefetch_factor", no_effect, "", kInProcessLoader},
      {"parallelism.disable_loss_parallel", no_effect, "false",
       "under tensor parallelism titan's loss is always the vocabulary-parallel fused one, equal to the gathered "
       "loss"},
      {"parallelism.enable_async_tensor_parallel", no_effect, "false",
       "tensor-parallel collectives are not overlapped with the matmuls (async TP is not built)"},
      {"parallelism.pipeline_parallel_expert_parallel_overlap", no_effect, "true",
       "titan does not overlap pipeline and expert-parallel communication"},
      {"parallelism.expert_tensor_parallel_degree", refused, "1",
       "titan keeps MoE experts whole on every tensor-parallel rank (expert tensor parallelism 1)"},
      {"parallelism.expert_parallel_comm_backend", refused, "standard",
       "titan's expert parallelism uses its own all-to-all; DeepEP is not used"},
      {"checkpoint.enable_ft_dataloader_checkpoints", no_effect, "true", kNoTorchft},
      {"checkpoint.initial_load_model_only", refused, "true",
       "checkpoint.initial_load_path loads model weights only; a full training state resumes from "
       "checkpoint.folder"},
      {"checkpoint.initial_load_in_hf", mapped, "false",
       "titan tells a Hugging Face folder in checkpoint.initial_load_path by its files; with no initial_load_path it "
       "loads model.hf_assets_path"},
      {"checkpoint.initial_load_in_hf_quantized", refused, "false", "quantised Hugging Face weights are not read"},
      {"checkpoint.last_save_model_only", no_effect, "true",
       "titan's last save holds the full training state, with a model export beside it"},
      {"checkpoint.last_save_in_hf", refused, "false",
       "the export is titan's own; `titan convert --from titan DIR --to hf OUT` writes a Hugging Face folder from it"},
      {"checkpoint.enable_first_step_checkpoint", refused, "false",
       "not built: checkpoints are saved every checkpoint.interval steps"},
      {"checkpoint.load_only", refused, "false", "not built: with checkpoint.enable every interval is saved"},
      {"activation_checkpoint.selective_ac_option", mapped, "2",
       "an integer N sets activation_checkpoint.selective_every = N (every N-th block); \"op\" asks for per-op "
       "selective recomputation, which is not built: mode selective then keeps every activation (mode none; the "
       "memory check says if that does not fit, and mode full recomputes every block)"},
      {"activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", no_effect, "moe.router.gate",
       kNoPerOpRecompute},
      {"activation_checkpoint.early_stop", no_effect, "false", kNoPerOpRecompute},
      {"activation_checkpoint.memory_budget", no_effect, "0.5",
       "activation_checkpoint.mode memory_budget is not built"},
      {"activation_checkpoint.visualize_memory_budget_pareto", no_effect, "false",
       "activation_checkpoint.mode memory_budget is not built"},
      {"activation_checkpoint.preserve_rng_state", no_effect, "true", kNotExposed},
      {"activation_checkpoint.determinism_check", no_effect, "default", kNotExposed},
      {"activation_checkpoint.debug", no_effect, "false", kNotExposed},
      {"compile.enable", no_effect, "false", kNoCompile},
      {"compile.components", no_effect, "model,loss", kNoCompile},
      {"compile.backend", no_effect, "inductor", kNoCompile},
      {"quantize.linear.float8.enable_fsdp_float8_all_gather", converter_setting, "false", kNoLowPrecision},
      {"quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", converter_setting, "false", kNoLowPrecision},
      {"quantize.linear.float8.recipe_name", converter_setting, "", kNoLowPrecision},
      {"quantize.linear.float8.filter_fqns", converter_setting, "", kNoLowPrecision},
      {"quantize.linear.float8.emulate", converter_setting, "false", kNoLowPrecision},
      {"quantize.linear.mx.mxfp8_dim1_cast_kernel_choice", converter_setting, "triton", kNoLowPrecision},
      {"quantize.linear.mx.recipe_name", converter_setting, "mxfp8_cublas", kNoLowPrecision},
      {"quantize.linear.mx.filter_fqns", converter_setting, "output", kNoLowPrecision},
      {"quantize.grouped_mm.float8.fqns", converter_setting, "", kNoLowPrecision},
      {"quantize.grouped_mm.mx.recipe_name", converter_setting, "mxfp8", kNoLowPrecision},
      {"quantize.grouped_mm.mx.fqns", converter_setting, "", kNoLowPrecision},
      {"comm.init_timeout_seconds", no_effect, "300", "comm.timeout_seconds bounds every collective, the first too"},
      {"comm.train_timeout_seconds", mapped, "100", "sets comm.timeout_seconds"},
      {"comm.save_traces_file_prefix", no_effect, "rank_", "flight-recorder dumps are comm_traces/rank_<r>.json"},
      {"memory_estimation.enable", no_effect, "false",
       "titan checks a job's memory before it starts (training.memory_check), and `titan estimate-memory` estimates "
       "any layout"},
      {"memory_estimation.disable_fake_mode", no_effect, "false",
       "titan's estimate builds the model on the meta device; comm.mode = \"fake_backend\" rehearses a rank"},
      {"fault_tolerance.enable", refused, "false", kNoTorchft},
      {"fault_tolerance.process_group", converter_setting, "gloo", kNoTorchft},
      {"fault_tolerance.process_group_timeout_ms", converter_setting, "10000", kNoTorchft},
      {"fault_tolerance.replica_id", converter_setting, "0", kNoTorchft},
      {"fault_tolerance.group_size", converter_setting, "0", kNoTorchft},
      {"fault_tolerance.min_replica_size", converter_setting, "1", kNoTorchft},
      {"fault_tolerance.semi_sync_method", converter_setting, "", kNoTorchft},
      {"experimental.custom_import", refused, "", "a Python module cannot extend titan"},
      {"experimental.custom_args_module", refused, "", "a Python module cannot extend titan's config"},
      {"validation.dataset", no_effect, "c4_validation",
       "titan validates on a held-out split of the training data (validation.split)"},
      {"validation.dataset_path", refused, "",
       "a separate validation dataset is not read: titan holds out validation.split of the training data"},
      {"validation.local_batch_size", no_effect, "8", kValidationShape},
      {"validation.seq_len", no_effect, "2048", kValidationShape},
      {"validation.dataloader.num_workers", no_effect, "0", kInProcessLoader},
      {"validation.dataloader.persistent_workers", no_effect, "false", kInProcessLoader},
      {"validation.dataloader.pin_memory", no_effect, "false", kInProcessLoader},
      {"validation.dataloader.prefetch_factor", no_effect, "", kInProcessLoader},
      {"debug.seed", mapped, "", "sets training.seed"},
      {"debug.deterministic", mapped, "false", "sets training.deterministic"},
      {"debug.deterministic_warn_only", no_effect, "false", kNotExposed},
      {"debug.moe_force_load_balance", refused, "false", "not built: tokens go where the router sends them"},
  };
}

int64_t whole_number(const std::string& value, const std::string& where, const std::string& key) {
  int64_t parsed = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  TITAN_CHECK(error == std::errc() && end == value.data() + value.size(), "{}: {} = '{}' is not an integer", where, key,
              value);
  return parsed;
}

bool truth(const std::string& value, const std::string& where, const std::string& key) {
  TITAN_CHECK(value == "true" || value == "false", "{}: {} = '{}' is not true or false", where, key, value);
  return value == "true";
}

void apply_mapped(JobConfig& config, const TorchTitanKey& entry, const std::string& value, const std::string& where) {
  const std::string& key = entry.key;
  if (key == "model.hf_assets_path") {
    config.torchtitan.hf_assets_path = value;
  } else if (key == "checkpoint.initial_load_in_hf") {
    config.torchtitan.initial_load_in_hf = truth(value, where, key);
  } else if (key == "activation_checkpoint.selective_ac_option") {
    config.torchtitan.per_op_recomputation = value == "op";
    if (value == "op") return;
    const int64_t every = whole_number(value, where, key);
    TITAN_CHECK(every >= 1, "{}: {} = {} must be a positive integer (every N-th block)", where, key, every);
    config.activation_checkpoint.selective_every = every;
  } else if (key == "comm.train_timeout_seconds") {
    config.comm.timeout_seconds = static_cast<double>(whole_number(value, where, key));
  } else if (key == "debug.seed") {
    if (!value.empty()) config.training.seed = whole_number(value, where, key);
  } else if (key == "debug.deterministic") {
    config.training.deterministic = truth(value, where, key);
  } else {
    fail("internal error: TorchTitan key {} is marked mapped but has no mapping", key);
  }
}

}  // namespace

const std::vector<TorchTitanKey>& torchtitan_keys() {
  static const std::vector<TorchTitanKey> table = make_table();
  return table;
}

const TorchTitanKey* find_torchtitan_key(const std::string& dotted) {
  for (const TorchTitanKey& entry : torchtitan_keys()) {
    if (entry.key == dotted) return &entry;
  }
  return nullptr;
}

bool is_torchtitan_section(const std::string& prefix) {
  for (const TorchTitanKey& entry : torchtitan_keys()) {
    if (entry.key.starts_with(prefix + ".")) return true;
  }
  return false;
}

void apply_torchtitan_key(JobConfig& config, const TorchTitanKey& entry, const std::string& value,
                          const std::string& where) {
  switch (entry.use) {
    case mapped:
      apply_mapped(config, entry, value, where);
      return;
    case converter_setting:
      return;
    case no_effect:
      if (value != entry.default_value) {
        const std::string notice =
            fmt::format("TorchTitan's {} = \"{}\" has no effect here: {}", entry.key, value, entry.why);
        if (std::find(config.notices.begin(), config.notices.end(), notice) == config.notices.end()) {
          config.notices.push_back(notice);
        }
      }
      return;
    case refused:
      TITAN_CHECK(value == entry.default_value, "{}: TorchTitan's {} = \"{}\" is not supported: {}", where, entry.key,
                  value, entry.why);
      return;
  }
}

std::string titan_family(const std::string& name, const std::string& flavor) {
  // TorchTitan's model registry (torchtitan/models/qwen3): these flavors are mixtures of experts.
  const bool moe_flavor = flavor == "debugmodel_moe" || flavor == "30B-A3B" || flavor == "235B-A22B";
  return name == "qwen3" && moe_flavor ? "qwen3_moe" : name;
}

void resolve_torchtitan_keys(JobConfig& config) {
  // TorchTitan spells dtypes out; titan's keys take both spellings and keep its own.
  for (std::string* dtype : {&config.training.mixed_precision_param, &config.training.mixed_precision_reduce,
                             &config.checkpoint.export_dtype}) {
    if (*dtype == "float32") *dtype = "f32";
    if (*dtype == "bfloat16") *dtype = "bf16";
    if (*dtype == "float16") *dtype = "f16";
  }
  if (config.torchtitan.per_op_recomputation && config.activation_checkpoint.mode == "selective") {
    config.activation_checkpoint.mode = "none";
    config.notices.push_back(
        "TorchTitan's activation_checkpoint.selective_ac_option = \"op\" (per-op selective recomputation) is not "
        "built: every activation is kept (activation_checkpoint.mode none); set mode full to recompute every block");
  }
  const std::string& assets = config.torchtitan.hf_assets_path;
  if (!assets.empty() && config.model.tokenizer_path.empty()) {
    config.model.tokenizer_path = assets.ends_with(".json") ? assets : assets + "/tokenizer.json";
  }
  if (config.torchtitan.initial_load_in_hf && config.checkpoint.initial_load_path.empty()) {
    TITAN_CHECK(!assets.empty(),
                "checkpoint.initial_load_in_hf = true needs the Hugging Face folder: set checkpoint.initial_load_path "
                "or model.hf_assets_path");
    config.checkpoint.initial_load_path = assets;
  }
}

}  // namespace titan::train
