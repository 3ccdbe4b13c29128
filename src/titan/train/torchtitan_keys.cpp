#include "titan/train/torchtitan_keys.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>

#include "titan/core/error.h"
#include "titan/train/job_config.h"

namespace titan::train {

namespace {

using enum TorchTitanKeyUse;
using enum TorchTitanRelease;

constexpr const char* kTitanKey = "titan's key, TorchTitan's meaning";
constexpr const char* kHsdpAcrossNodes =
    "titan's key; on several nodes both left at their defaults mean HSDP, sharded within a node (distributed.md, "
    "Nodes)";
constexpr const char* kNoProfilerWindow = "titan's profiler records every profile_freq-th step whole";
constexpr const char* kInProcessLoader = "titan's loader reads prepared token shards inside the training process";
constexpr const char* kNotExposed = "titan does not expose this choice";
constexpr const char* kNoCompile =
    "titan runs its own compiled kernels; there is no torch.compile (training.graph_capture replays whole steps on "
    "CUDA)";
constexpr const char* kFloat8Key =
    "titan's key, TorchTitan's meaning, read when model.converters names its table (docs/float8.md)";
constexpr const char* kNoTorchft =
    "a restarted replica group takes the data loader's position from a live peer (fault_tolerance.enable)";
constexpr const char* kValidationShape = "validation uses training.local_batch_size and training.seq_len";
constexpr const char* kNoAsyncTp =
    "tensor-parallel collectives are not overlapped with the matmuls (async TP is not built)";
constexpr const char* kPrintConfig = "titan train --print-config prints the merged config (and exits)";
constexpr const char* kSaveConfig = "titan writes the merged config as job.toml into every checkpoint and export";
constexpr const char* kHeldOut =
    "a separate validation dataset is not read: titan holds out validation.split of the training data";
constexpr const char* kCollator =
    "titan packs text into rows of training.seq_len tokens with next-token labels (TorchTitan's text collator); other "
    "collators are not built";
constexpr const char* kValidationOrder =
    "titan reads the held-out split in order, once per validation (validation.steps batches at most)";
constexpr const char* kPrefetch =
    "titan's loader prepares batches ahead on its prefetch thread, whose depth is not exposed";
constexpr const char* kMultimodal =
    "read only by the tokenizer of TorchTitan's multimodal (image and video) models; titan's models are text-only";
constexpr const char* kVocabFromModel = "titan's loss takes the vocabulary size from the model";

std::vector<TorchTitanKey> make_table() {
  return {
      {"job.config_file", no_effect, "", "titan train --config FILE names the file", v0_2_2},
      {"job.dump_folder", titan_key, "", kTitanKey, v0_2_2},
      {"dump_folder", mapped, "./outputs", "sets job.dump_folder", current},
      {"job.description", titan_key, "", kTitanKey, v0_2_2},
      {"job.print_config", no_effect, "false", kPrintConfig, v0_2_2},
      {"job.save_config_file", no_effect, "", kSaveConfig, v0_2_2},
      {"job.custom_config_module", refused, "", "a Python module cannot extend titan's config", v0_2_2},
      {"profiling.enable_profiling", titan_key, "", kTitanKey, v0_2_2},
      {"profiling.save_traces_folder", titan_key, "", kTitanKey, v0_2_2},
      {"profiling.profile_freq", titan_key, "", kTitanKey, v0_2_2},
      {"profiling.profiler_active", no_effect, "1", kNoProfilerWindow, v0_2_2},
      {"profiling.profiler_warmup", no_effect, "3", kNoProfilerWindow, v0_2_2},
      {"profiling.enable_memory_snapshot", titan_key, "", kTitanKey, v0_2_2},
      {"profiling.save_memory_snapshot_folder", titan_key, "", kTitanKey, v0_2_2},
      {"profiler.enable_profiling", mapped, "false", "sets profiling.enable_profiling", current},
      {"profiler.save_traces_folder", mapped, "profiling/traces", "sets profiling.save_traces_folder", current},
      {"profiler.profile_freq", mapped, "10", "sets profiling.profile_freq", current},
      {"profiler.profiler_repeat", no_effect, "", kNoProfilerWindow, current},
      {"profiler.profiler_skip_first", no_effect, "", kNoProfilerWindow, current},
      {"profiler.profiler_skip_first_wait", no_effect, "", kNoProfilerWindow, current},
      {"profiler.profiler_active", no_effect, "1", kNoProfilerWindow, current},
      {"profiler.profiler_warmup", no_effect, "3", kNoProfilerWindow, current},
      {"profiler.enable_memory_snapshot", mapped, "false", "sets profiling.enable_memory_snapshot", current},
      {"profiler.memory_snapshot_freq", no_effect, "",
       "titan writes a memory snapshot every profiling.profile_freq steps (and on out-of-memory)", current},
      {"profiler.save_memory_snapshot_folder", mapped, "profiling/memory_snapshot",
       "sets profiling.save_memory_snapshot_folder", current},
      {"profiler.memory_snapshot_max_entries", no_effect, "1000000",
       "titan's memory recorder keeps every event; it has no cap to set", current},
      {"profiler.trace_post_processor", refused, "", "a Python hook cannot run in titan", current},
      {"metrics.log_freq", titan_key, "", kTitanKey, both},
      {"metrics.enable_tensorboard", titan_key, "", kTitanKey, both},
      {"metrics.disable_color_printing", no_effect, "false", "titan's metrics line has no colour codes", both},
      {"metrics.save_tb_folder", titan_key, "", kTitanKey, both},
      {"metrics.save_for_all_ranks", no_effect, "false",
       "rank 0 writes metrics.jsonl, with every pipeline and context rank's bubble and peak memory as arrays", both},
      {"metrics.enable_wandb", refused, "false",
       "Weights & Biases needs a network service; metrics.enable_tensorboard writes the same scalars locally", both},
      {"model.name", titan_key, "",
       "titan's key; `qwen3` with an MoE flavor selects titan's `qwen3_moe`; families titan lacks (llama4, ...) "
       "are refused naming the known ones",
       v0_2_2},
      {"model.flavor", titan_key, "", "titan's key, TorchTitan's flavor names where titan has the model", v0_2_2},
      {"model.hf_assets_path", mapped, "./tests/assets/tokenizer",
       "its tokenizer.json becomes model.tokenizer_path (unless that is set), and it is the Hugging Face folder "
       "checkpoint.initial_load_in_hf loads",
       v0_2_2},
      {"hf_assets_path", mapped, "./tests/assets/tokenizer",
       "model.hf_assets_path's current spelling: its tokenizer.json becomes model.tokenizer_path (unless that is set), "
       "and it is the Hugging Face folder checkpoint.initial_load_in_hf loads",
       current},
      {"model.tokenizer_path", titan_key, "", kTitanKey, v0_2_2},
      {"model.converters", titan_key, "",
       "titan's key, TorchTitan's meaning: quantize.linear.float8, quantize.linear.mx, quantize.grouped_mm.float8 and "
       "quantize.grouped_mm.mx (docs/float8.md)",
       v0_2_2},
      {"model.print_after_conversion", no_effect, "false",
       "titan prints how many Linears the converter changed, not the model", v0_2_2},
      {"tokenizer.image_token", converter_setting, "", kMultimodal, current},
      {"tokenizer.video_token", converter_setting, "", kMultimodal, current},
      {"tokenizer.vision_start_token", converter_setting, "", kMultimodal, current},
      {"tokenizer.vision_end_token", converter_setting, "", kMultimodal, current},
      {"tokenizer.pad_token", converter_setting, "", kMultimodal, current},
      {"optimizer.name", titan_key, "", kTitanKey, v0_2_2},
      {"optimizer.lr", titan_key, "", kTitanKey, v0_2_2},
      {"optimizer.beta1", titan_key, "", kTitanKey, v0_2_2},
      {"optimizer.beta2", titan_key, "", kTitanKey, v0_2_2},
      {"optimizer.eps", titan_key, "", kTitanKey, v0_2_2},
      {"optimizer.weight_decay", titan_key, "", kTitanKey, v0_2_2},
      {"optimizer.implementation", mapped, "fused",
       "\"fused_opt_states_bf16\" sets optimizer.state_dtype = bf16 (AdamW moments in bf16); for-loop and foreach add "
       "a notice: titan's AdamW has one vectorised implementation, computing the same update",
       both},
      {"optimizer.early_step_in_backward", refused, "false",
       "titan steps the optimizer after the backward and its gradient clipping", v0_2_2},
      {"optimizer.param_groups", refused, "",
       "titan's optimizer keys (optimizer.name, lr, beta1, beta2, eps, weight_decay, no_weight_decay) configure one "
       "AdamW for every parameter; per-group optimizers are not built",
       current},
      {"optimizer.optimizer_factory_kwargs_by_name", refused, "",
       "titan's optimizer is AdamW, which takes no factory arguments (DistMuon is not built)", current},
      {"lr_scheduler.warmup_steps", titan_key, "", kTitanKey, both},
      {"lr_scheduler.total_steps", titan_key, "",
       "titan's key, TorchTitan's meaning; steps past it keep the last step's LR", both},
      {"lr_scheduler.decay_ratio", titan_key, "", "titan's key, TorchTitan's schedule to the step (docs/commands.md)",
       both},
      {"lr_scheduler.decay_type", titan_key, "", kTitanKey, both},
      {"lr_scheduler.min_lr_factor", titan_key, "", kTitanKey, both},
      {"training.dataset", titan_key, "",
       "titan's key: a name for the logs; the data is training.dataset_path (prepared shards, text or JSONL)", v0_2_2},
      {"training.dataset_path", titan_key, "",
       "titan's key: prepared token shards (`titan data prepare`), a text file or JSONL", v0_2_2},
      {"training.local_batch_size", titan_key, "", kTitanKey, v0_2_2},
      {"training.global_batch_size", titan_key, "", kTitanKey, v0_2_2},
      {"training.seq_len", titan_key, "", kTitanKey, v0_2_2},
      {"training.num_tokens_per_microbatch_per_dp_rank", mapped, "16384",
       "divided by training.seq_len (a whole multiple, else an error), the sequences of one micro-batch: sets "
       "training.local_batch_size, or under pipeline parallelism parallelism.pipeline_parallel_microbatch_size (and "
       "local_batch_size = that x the pipeline micro-batches)",
       current},
      {"training.num_tokens_per_train_step", mapped, "-1",
       "divided by training.seq_len (a whole multiple, else an error) sets training.global_batch_size; -1 "
       "(TorchTitan's default: no gradient accumulation) leaves it, whose default -1 means the same",
       current},
      {"training.max_context_length", mapped, "2048", "sets training.seq_len", current},
      {"training.max_norm", titan_key, "", kTitanKey, both},
      {"training.steps", titan_key, "", kTitanKey, both},
      {"training.enable_cpu_offload", refused, "false", "offloading parameters and optimizer state is not built", both},
      {"training.disable_cuda_graphs", mapped, "false",
       "true sets training.graph_capture = false; false (TorchTitan's default, capturing) sets training.graph_capture "
       "on CUDA jobs that can record whole steps; elsewhere it has no effect, said in a notice",
       current},
      {"training.dtype", refused, "float32",
       "training without f32 master weights is not built; training.mixed_precision_param = \"bfloat16\" computes in "
       "bf16 over f32 master weights",
       both},
      {"training.mixed_precision_param", titan_key, "",
       "titan's key; accepts `bfloat16`/`float32` (and `bf16`/`f32`); titan's default is f32, TorchTitan's bfloat16",
       both},
      {"training.mixed_precision_reduce", titan_key, "", kTitanKey, both},
      {"training.gc_freq", no_effect, "50", "titan has no garbage collector to run", both},
      {"training.gc_debug", no_effect, "false", "titan has no garbage collector to run", both},
      {"training.dataloader.num_workers", no_effect, "0", kInProcessLoader, v0_2_2},
      {"training.dataloader.persistent_workers", no_effect, "false", kInProcessLoader, v0_2_2},
      {"training.dataloader.pin_memory", no_effect, "false", kInProcessLoader, v0_2_2},
      {"training.dataloader.prefetch_factor", no_effect, "", kInProcessLoader, v0_2_2},
      {"dataloader.dataset", refused, "",
       "a dataset is a Python object here; titan reads training.dataset_path (prepared shards, text or JSONL)",
       current},
      {"dataloader.collator", refused, "", kCollator, current},
      {"dataloader.seed", no_effect, "42", "titan's data order follows training.seed (which also seeds initialisation)",
       current},
      {"dataloader.shuffle", refused, "true",
       "titan's training loader always draws a new order of the documents each epoch, from training.seed", current},
      {"dataloader.repeat", refused, "true",
       "titan's training loader starts another epoch when the data runs out; training.steps ends the job", current},
      {"dataloader.streaming_shuffle_buffer_size", no_effect, "1000",
       "titan shuffles whole documents of prepared shards; there is no streaming buffer", current},
      {"dataloader.read_options", no_effect, "", kInProcessLoader, current},
      {"dataloader.num_prefetch_batches", no_effect, "2", kPrefetch, current},
      {"parallelism.data_parallel_replicate_degree", titan_key, "", kHsdpAcrossNodes, both},
      {"parallelism.data_parallel_shard_degree", titan_key, "", kHsdpAcrossNodes, both},
      {"parallelism.fsdp_reshard_after_forward", titan_key, "", kTitanKey, both},
      {"parallelism.enable_fsdp_symm_mem", no_effect, "false",
       "titan's FSDP collectives run on NCCL (MPI on CPUs) without symmetric-memory buffers", current},
      {"parallelism.tensor_parallel_degree", titan_key, "", kTitanKey, both},
      {"parallelism.enable_sequence_parallel", refused, "true",
       "titan's tensor parallelism always trains with sequence parallelism (without it, it serves generation only)",
       current},
      {"parallelism.spmd_backend", no_effect, "spmd_types",
       "titan's parallel layouts are its own autograd ops; there is no DTensor or spmd_types backend to choose",
       current},
      {"parallelism.disable_loss_parallel", no_effect, "false",
       "under tensor parallelism titan's loss is always the vocabulary-parallel fused one, equal to the gathered loss",
       v0_2_2},
      {"parallelism.enable_async_tensor_parallel", no_effect, "false", kNoAsyncTp, v0_2_2},
      {"parallelism.pipeline_parallel_degree", titan_key, "", kTitanKey, both},
      {"parallelism.module_fqns_per_model_part", titan_key, "", kTitanKey, both},
      {"parallelism.pipeline_parallel_first_stage_less_layers", titan_key, "", kTitanKey, both},
      {"parallelism.pipeline_parallel_last_stage_less_layers", titan_key, "", kTitanKey, both},
      {"parallelism.pipeline_parallel_layers_per_stage", titan_key, "", kTitanKey, both},
      {"parallelism.pipeline_parallel_schedule", titan_key, "", kTitanKey, both},
      {"parallelism.pipeline_parallel_schedule_csv", titan_key, "", kTitanKey, both},
      {"parallelism.pipeline_parallel_microbatch_size", titan_key, "", kTitanKey, v0_2_2},
      {"parallelism.num_pp_microbatches", mapped, "1",
       "under pipeline parallelism, the micro-batches of a step: sets parallelism.pipeline_parallel_microbatch_size = "
       "training.local_batch_size / this (a whole number, else an error), or with "
       "training.num_tokens_per_microbatch_per_dp_rank, training.local_batch_size = this x its micro-batch; without "
       "pipeline parallelism it is ignored, as in TorchTitan",
       current},
      {"parallelism.pipeline_parallel_expert_parallel_overlap", no_effect, "true",
       "titan does not overlap pipeline and expert-parallel communication", v0_2_2},
      {"parallelism.context_parallel_degree", titan_key, "", kTitanKey, both},
      {"parallelism.context_parallel_load_balancer", titan_key, "", kTitanKey, both},
      {"parallelism.context_parallel_rotate_method", titan_key, "", kTitanKey, v0_2_2},
      {"parallelism.context_parallel_ptrr_mask_key", converter_setting, "",
       "read only by context_parallel_load_balancer = \"ptrr\" (for FlexAttention), which titan refuses: its balancers "
       "are headtail and none",
       current},
      {"parallelism.expert_parallel_degree", titan_key, "", kTitanKey, both},
      {"parallelism.expert_tensor_parallel_degree", refused, "1",
       "titan keeps MoE experts whole on every tensor-parallel rank (expert tensor parallelism 1)", v0_2_2},
      {"parallelism.expert_parallel_comm_backend", refused, "standard",
       "titan's expert parallelism uses its own all-to-all; DeepEP is not used", v0_2_2},
      {"checkpoint.enable", titan_key, "",
       "titan's key, TorchTitan's meaning: false saves nothing (titan still reads `checkpoint.initial_load_path`, "
       "which TorchTitan ignores without it)",
       both},
      {"checkpoint.enable_ft_dataloader_checkpoints", no_effect, "true", kNoTorchft, v0_2_2},
      {"checkpoint.folder", titan_key, "", kTitanKey, both},
      {"checkpoint.interval", titan_key, "", kTitanKey, both},
      {"checkpoint.initial_load_path", titan_key, "", kTitanKey, both},
      {"checkpoint.initial_load_model_only", titan_key, "",
       "titan's key, TorchTitan's meaning: false restores a titan step folder's whole training state, or a DCP "
       "folder's as TorchTitan lays it out ([checkpoints.md](checkpoints.md)) (but `exclude_from_loading`)",
       both},
      {"checkpoint.initial_load_in_hf", mapped, "false",
       "titan tells a Hugging Face folder in checkpoint.initial_load_path by its files (true refuses any other "
       "folder); with no initial_load_path it loads model.hf_assets_path",
       both},
      {"checkpoint.initial_load_in_hf_quantized", refused, "false", "quantised Hugging Face weights are not read",
       both},
      {"checkpoint.last_save_model_only", titan_key, "",
       "titan's key, TorchTitan's meaning: the last save is titan's model export (weights in `export_dtype`, "
       "`job.toml`, tokenizer) that `titan generate` loads; false saves the full state",
       both},
      {"checkpoint.last_save_in_hf", titan_key, "",
       "titan's key, TorchTitan's meaning: the last save is a Hugging Face folder (config.json, safetensors, "
       "tokenizer.json); needs `last_save_model_only`",
       both},
      {"checkpoint.export_dtype", titan_key, "",
       "titan's key, TorchTitan's meaning (the model-only last save's dtype); accepts `float32`, `bfloat16`, `float16` "
       "(and `f32`, `bf16`, `f16`)",
       both},
      {"checkpoint.async_mode", titan_key, "", kTitanKey, both},
      {"checkpoint.keep_latest_k", titan_key, "",
       "titan's key, TorchTitan's meaning; titan's default is 0 (keep every checkpoint), TorchTitan's 10", both},
      {"checkpoint.load_step", titan_key, "", kTitanKey, both},
      {"checkpoint.exclude_from_loading", titan_key, "", kTitanKey, both},
      {"checkpoint.enable_first_step_checkpoint", titan_key, "", kTitanKey, both},
      {"checkpoint.create_seed_checkpoint", titan_key, "", kTitanKey, both},
      {"checkpoint.load_only", titan_key, "", kTitanKey, both},
      {"activation_checkpoint.mode", titan_key, "",
       "titan's key: none, full, selective (every selective_every-th block, or per op with selective_ops), offload, or "
       "memory_budget (titan's estimator picks the plan; see activation_checkpoint.memory_budget)",
       v0_2_2},
      {"activation_checkpoint.selective_ac_option", mapped, "2",
       "an integer N sets activation_checkpoint.selective_every = N (every N-th block); \"op\" sets "
       "activation_checkpoint.selective_ops = true (TorchTitan's per-op policy)",
       v0_2_2},
      {"activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns", titan_key, "",
       "with selective_ops: Linears whose name contains one of these are always recomputed", v0_2_2},
      {"activation_checkpoint.force_recompute_mm_shapes_by_fqns", mapped, "moe.router.gate",
       "sets activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns (its v0.2.2 name)", current},
      {"activation_checkpoint.early_stop", no_effect, "false",
       "titan's recompute runs the checkpointed block through (its output is needed); there is no early stop", v0_2_2},
      {"activation_checkpoint.memory_budget", titan_key, "",
       "with mode memory_budget: 0 recomputes as much as full checkpointing, 1 keeps every activation; between, "
       "titan's memory estimate picks the plan (none, selective every N-th block, per op, full) keeping the most "
       "activations within full + budget x (none - full). TorchTitan's compiler partitions ops instead; the ends agree",
       both},
      {"activation_checkpoint.visualize_memory_budget_pareto", no_effect, "false",
       "titan prints the plan memory_budget picks and its estimate; there is no Pareto plot", both},
      {"activation_checkpoint.preserve_rng_state", no_effect, "true", kNotExposed, both},
      {"activation_checkpoint.determinism_check", no_effect, "default", kNotExposed, both},
      {"activation_checkpoint.debug", no_effect, "false", kNotExposed, both},
      {"compile.enable", mapped, "false",
       "true sets training.graph_capture on CUDA jobs that can record whole steps (titan's counterpart of "
       "torch.compile's fused graphs); elsewhere it has no effect, said in a notice",
       both},
      {"compile.enable_async_tensor_parallel", no_effect, "false", kNoAsyncTp, current},
      {"compile.components", no_effect, "model,loss", kNoCompile, both},
      {"compile.backend", no_effect, "inductor", kNoCompile, both},
      {"quantize.linear.float8.enable_fsdp_float8_all_gather", titan_key, "", kFloat8Key, v0_2_2},
      {"quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", titan_key, "", kFloat8Key, v0_2_2},
      {"quantize.linear.float8.recipe_name", titan_key, "", kFloat8Key, v0_2_2},
      {"quantize.linear.float8.filter_fqns", titan_key, "", kFloat8Key, v0_2_2},
      {"quantize.linear.float8.emulate", titan_key, "", kFloat8Key, v0_2_2},
      {"quantize.linear.mx.mxfp8_dim1_cast_kernel_choice", titan_key, "", kFloat8Key, v0_2_2},
      {"quantize.linear.mx.recipe_name", titan_key, "", kFloat8Key, v0_2_2},
      {"quantize.linear.mx.filter_fqns", titan_key, "", kFloat8Key, v0_2_2},
      {"quantize.grouped_mm.float8.fqns", titan_key, "", kFloat8Key, v0_2_2},
      {"quantize.grouped_mm.mx.recipe_name", titan_key, "", kFloat8Key, v0_2_2},
      {"quantize.grouped_mm.mx.fqns", titan_key, "", kFloat8Key, v0_2_2},
      {"comm.init_timeout_seconds", no_effect, "300", "comm.timeout_seconds bounds every collective, the first too",
       both},
      {"comm.train_timeout_seconds", mapped, "100", "sets comm.timeout_seconds", both},
      {"comm.trace_buf_size", titan_key, "", kTitanKey, both},
      {"comm.save_traces_folder", titan_key, "", kTitanKey, both},
      {"comm.save_traces_file_prefix", no_effect, "rank_", "flight-recorder dumps are comm_traces/rank_<r>.json", both},
      {"comm.mode", titan_key, "",
       "titan's key: default or fake_backend (with comm.fake_world_size / fake_rank); local_tensor is refused", both},
      {"memory_estimation.enable", no_effect, "false",
       "titan checks a job's memory before it starts (training.memory_check), and `titan estimate-memory` estimates "
       "any layout",
       v0_2_2},
      {"memory_estimation.disable_fake_mode", no_effect, "false",
       "titan's estimate builds the model on the meta device; comm.mode = \"fake_backend\" rehearses a rank", v0_2_2},
      {"fault_tolerance.enable", titan_key, "", kTitanKey, v0_2_2},
      {"fault_tolerance.process_group", titan_key, "", "titan's key: gloo (nccl is not built)", v0_2_2},
      {"fault_tolerance.process_group_timeout_ms", titan_key, "", kTitanKey, v0_2_2},
      {"fault_tolerance.replica_id", titan_key, "", kTitanKey, v0_2_2},
      {"fault_tolerance.group_size", titan_key, "", kTitanKey, v0_2_2},
      {"fault_tolerance.min_replica_size", titan_key, "", kTitanKey, v0_2_2},
      {"fault_tolerance.semi_sync_method", titan_key, "",
       "titan's key: only empty (every step synchronous); local_sgd and diloco are not built", v0_2_2},
      {"experimental.custom_import", refused, "", "a Python module cannot extend titan", v0_2_2},
      {"experimental.custom_args_module", refused, "", "a Python module cannot extend titan's config", v0_2_2},
      {"validation.enable", titan_key, "", kTitanKey, v0_2_2},
      {"validation.dataset", no_effect, "c4_validation",
       "titan validates on a held-out split of the training data (validation.split)", v0_2_2},
      {"validation.dataset_path", titan_key, "",
       "titan's key for flux jobs (a captions .jsonl encoded on the fly); a language model validates on "
       "validation.split of the training data",
       v0_2_2},
      {"validation.local_batch_size", no_effect, "8", kValidationShape, v0_2_2},
      {"validation.seq_len", no_effect, "2048", kValidationShape, v0_2_2},
      {"validation.freq", titan_key, "", kTitanKey, v0_2_2},
      {"validation.steps", titan_key, "", kTitanKey, v0_2_2},
      {"validation.dataloader.num_workers", no_effect, "0", kInProcessLoader, v0_2_2},
      {"validation.dataloader.persistent_workers", no_effect, "false", kInProcessLoader, v0_2_2},
      {"validation.dataloader.pin_memory", no_effect, "false", kInProcessLoader, v0_2_2},
      {"validation.dataloader.prefetch_factor", no_effect, "", kInProcessLoader, v0_2_2},
      {"validator.freq", mapped, "10", "sets validation.freq", current},
      {"validator.enable", mapped, "false",
       "sets validation.enable (titan validates on a held-out split of the training data, validation.split)", current},
      {"validator.steps", mapped, "-1", "sets validation.steps; -1 validates on the whole held-out split", current},
      {"validator.dataloader.dataset", refused, "", kHeldOut, current},
      {"validator.dataloader.collator", refused, "", kCollator, current},
      {"validator.dataloader.seed", no_effect, "42", kValidationOrder, current},
      {"validator.dataloader.shuffle", no_effect, "true", kValidationOrder, current},
      {"validator.dataloader.repeat", no_effect, "false", kValidationOrder, current},
      {"validator.dataloader.streaming_shuffle_buffer_size", no_effect, "1000", kValidationOrder, current},
      {"validator.dataloader.read_options", no_effect, "", kInProcessLoader, current},
      {"validator.dataloader.num_prefetch_batches", no_effect, "2", kPrefetch, current},
      {"debug.seed", mapped, "", "sets training.seed", both},
      {"debug.deterministic", mapped, "false", "sets training.deterministic", both},
      {"debug.deterministic_warn_only", no_effect, "false", kNotExposed, both},
      {"debug.moe_force_load_balance", refused, "false", "not built: tokens go where the router sends them", both},
      {"debug.spmd_typechecking", no_effect, "false", "titan has no spmd_types backend to type-check", current},
      {"debug.detect_anomaly", no_effect, "false",
       "titan checks each step: a non-finite loss or gradient ends the job naming the first parameter whose gradient "
       "is not finite (training.skip_nonfinite_steps skips the step instead); there is no per-op anomaly mode",
       current},
      {"debug.batch_invariant", refused, "false",
       "batch-invariant kernels are not built (TorchTitan's pre-training trainer refuses it too)", current},
      {"debug.print_config", no_effect, "false", kPrintConfig, current},
      {"debug.save_config_file", no_effect, "", kSaveConfig, current},
      {"debug.enable_structured_logging", no_effect, "true",
       "titan has no structured trace logger; profiling.enable_profiling writes per-rank Chrome traces", current},
      {"override.imports", refused, "",
       "a Python module cannot replace titan's components (titan's keys choose its blocks, e.g. model.attention)",
       current},
      {"loss.num_chunks", no_effect, "8",
       "titan's fused linear cross-entropy never holds whole logits (model.fused_loss): it tiles the vocabulary "
       "(model.loss_vocab_chunk), not the sequence",
       current},
      {"loss.global_vocab_size", no_effect, "", kVocabFromModel, current},
      {"loss.mtp_scale", mapped, "0.3", "sets model.mtp_scale (read when model.num_mtp_layers > 0)", current},
      {"loss.loss_fn.global_vocab_size", no_effect, "", kVocabFromModel, current},
      {"loss.loss_fn.mtp_scale", mapped, "0.3", "sets model.mtp_scale (read when model.num_mtp_layers > 0)", current},
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

void add_notice(JobConfig& config, const std::string& notice) {
  if (std::find(config.notices.begin(), config.notices.end(), notice) == config.notices.end()) {
    config.notices.push_back(notice);
  }
}

// A list's canonical text ("a,b"): its items.
std::vector<std::string> items(const std::string& value) {
  std::vector<std::string> out;
  std::string item;
  for (std::istringstream stream(value); std::getline(stream, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// TorchTitan's token budgets are counts of tokens > 0; num_tokens_per_train_step may also be -1.
int64_t token_count(const std::string& value, const std::string& where, const std::string& key, bool minus_one) {
  const int64_t tokens = whole_number(value, where, key);
  TITAN_CHECK(tokens > 0 || (minus_one && tokens == -1), "{}: {} = {} must be > 0{}", where, key, tokens,
              minus_one ? " (or -1: no gradient accumulation)" : "");
  return tokens;
}

void apply_mapped(JobConfig& config, const TorchTitanKey& entry, const std::string& value, const std::string& where) {
  const std::string& key = entry.key;
  JobConfig::TorchTitanCarry& carry = config.torchtitan;
  if (key == "model.hf_assets_path" || key == "hf_assets_path") {
    carry.hf_assets_path = value;
  } else if (key == "dump_folder") {
    config.job.dump_folder = value;
  } else if (key == "profiler.enable_profiling") {
    config.profiling.enable_profiling = truth(value, where, key);
  } else if (key == "profiler.save_traces_folder") {
    config.profiling.save_traces_folder = value;
  } else if (key == "profiler.profile_freq") {
    config.profiling.profile_freq = whole_number(value, where, key);
  } else if (key == "profiler.enable_memory_snapshot") {
    config.profiling.enable_memory_snapshot = truth(value, where, key);
  } else if (key == "profiler.save_memory_snapshot_folder") {
    config.profiling.save_memory_snapshot_folder = value;
  } else if (key == "optimizer.implementation") {
    TITAN_CHECK(value == "fused" || value == "foreach" || value == "for-loop" || value == "fused_opt_states_bf16",
                "{}: {} = \"{}\" is not one of for-loop, foreach, fused, fused_opt_states_bf16", where, key, value);
    if (value == "fused_opt_states_bf16") {
      config.optimizer.state_dtype = "bf16";
    } else if (value != "fused") {
      add_notice(config, fmt::format("TorchTitan's {} = \"{}\" has no effect here: titan's AdamW has one vectorised "
                                     "implementation, computing the same update",
                                     key, value));
    }
  } else if (key == "training.num_tokens_per_microbatch_per_dp_rank") {
    carry.tokens_per_microbatch = token_count(value, where, key, false);
  } else if (key == "training.num_tokens_per_train_step") {
    carry.tokens_per_train_step = token_count(value, where, key, true);
  } else if (key == "training.max_context_length") {
    config.training.seq_len = token_count(value, where, key, false);
  } else if (key == "training.disable_cuda_graphs") {
    const bool disable = truth(value, where, key);
    carry.disable_cuda_graphs = disable ? 1 : 0;
    // Set here, so that titan's own training.graph_capture later in the file or on the command line still wins.
    if (disable) config.training.graph_capture = false;
  } else if (key == "parallelism.num_pp_microbatches") {
    carry.pp_microbatches = whole_number(value, where, key);
    TITAN_CHECK(carry.pp_microbatches > 0, "{}: {} = {} must be > 0", where, key, carry.pp_microbatches);
  } else if (key == "checkpoint.initial_load_in_hf") {
    carry.initial_load_in_hf = truth(value, where, key);
  } else if (key == "compile.enable") {
    carry.compile = truth(value, where, key);
  } else if (key == "activation_checkpoint.selective_ac_option") {
    config.activation_checkpoint.selective_ops = value == "op";
    if (value == "op") return;
    const int64_t every = whole_number(value, where, key);
    TITAN_CHECK(every >= 1, "{}: {} = {} must be a positive integer (every N-th block)", where, key, every);
    config.activation_checkpoint.selective_every = every;
  } else if (key == "activation_checkpoint.force_recompute_mm_shapes_by_fqns") {
    config.activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns = items(value);
  } else if (key == "comm.train_timeout_seconds") {
    config.comm.timeout_seconds = static_cast<double>(whole_number(value, where, key));
  } else if (key == "validator.enable") {
    config.validation.enable = truth(value, where, key);
  } else if (key == "validator.freq") {
    config.validation.freq = whole_number(value, where, key);
  } else if (key == "validator.steps") {
    // TorchTitan's -1: the whole validation set. titan's validation stops where the held-out split ends.
    const int64_t steps = whole_number(value, where, key);
    config.validation.steps = steps == -1 ? std::numeric_limits<int64_t>::max() : steps;
  } else if (key == "loss.mtp_scale" || key == "loss.loss_fn.mtp_scale") {
    double scale = 0.0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), scale);
    TITAN_CHECK(error == std::errc() && end == value.data() + value.size() && std::isfinite(scale) && scale >= 0,
                "{}: {} = '{}' is not a number >= 0", where, key, value);
    config.model.mtp_scale = scale;
  } else if (key == "debug.seed") {
    if (!value.empty()) config.training.seed = whole_number(value, where, key);
  } else if (key == "debug.deterministic") {
    config.training.deterministic = truth(value, where, key);
  } else {
    fail("internal error: TorchTitan key {} is marked mapped but has no mapping", key);
  }
}

// Why graph capture cannot record this job's steps (the conditions validate() puts on it), or nullptr.
const char* no_capture_reason(const JobConfig& config) {
  return config.training.device != "cuda"                  ? "only CUDA jobs record steps"
         : !config.model.fused_loss                        ? "model.fused_loss is false"
         : config.activation_checkpoint.mode == "offload"  ? "activation_checkpoint.mode is offload"
         : config.lora.enable && config.lora.dropout > 0.0 ? "LoRA dropout draws a new mask each step"
         : config.training.skip_nonfinite_steps            ? "training.skip_nonfinite_steps is on"
         : config.model.moe_expert_impl == "loop"          ? "model.moe_expert_impl is loop"
         : config.parallelism.pipeline_parallel_degree > 1 ? "pipeline parallelism waits on other stages"
                                                           : nullptr;
}

// TorchTitan's token budgets as titan's batch sizes, in sequences of training.seq_len.
void resolve_token_budgets(JobConfig& config) {
  const JobConfig::TorchTitanCarry& carry = config.torchtitan;
  TrainingSection& training = config.training;
  ParallelismSection& parallelism = config.parallelism;
  const int64_t seq_len = training.seq_len;
  TITAN_CHECK(seq_len > 0, "training.seq_len must be > 0, got {}", seq_len);
  const bool pipelined = parallelism.pipeline_parallel_degree > 1;
  if (carry.tokens_per_microbatch > 0) {
    TITAN_CHECK(carry.tokens_per_microbatch % seq_len == 0,
                "training.num_tokens_per_microbatch_per_dp_rank = {} is not a multiple of training.seq_len {} "
                "(TorchTitan's training.max_context_length): titan's micro-batches are whole sequences; use a "
                "multiple such as {}",
                carry.tokens_per_microbatch, seq_len,
                std::max<int64_t>(1, carry.tokens_per_microbatch / seq_len) * seq_len);
    const int64_t rows = carry.tokens_per_microbatch / seq_len;
    if (pipelined) {
      // With num_pp_microbatches unset, the count titan's own keys give.
      const int64_t count =
          carry.pp_microbatches > 0
              ? carry.pp_microbatches
              : std::max<int64_t>(
                    1, training.local_batch_size / std::max<int64_t>(1, parallelism.pipeline_parallel_microbatch_size));
      parallelism.pipeline_parallel_microbatch_size = rows;
      training.local_batch_size = count * rows;
    } else {
      training.local_batch_size = rows;
    }
  } else if (pipelined && carry.pp_microbatches > 0) {
    TITAN_CHECK(training.local_batch_size % carry.pp_microbatches == 0,
                "parallelism.num_pp_microbatches = {} does not divide training.local_batch_size {}: each pipeline "
                "micro-batch is a whole number of sequences",
                carry.pp_microbatches, training.local_batch_size);
    parallelism.pipeline_parallel_microbatch_size = training.local_batch_size / carry.pp_microbatches;
  }
  // -1, TorchTitan's default, leaves training.global_batch_size, whose default -1 means the same.
  if (carry.tokens_per_train_step > 0) {
    TITAN_CHECK(carry.tokens_per_train_step % seq_len == 0,
                "training.num_tokens_per_train_step = {} is not a multiple of training.seq_len {} (TorchTitan's "
                "training.max_context_length): titan's optimizer steps take whole sequences "
                "(training.global_batch_size)",
                carry.tokens_per_train_step, seq_len);
    training.global_batch_size = carry.tokens_per_train_step / seq_len;
  }
}

}  // namespace

const std::vector<TorchTitanKey>& torchtitan_keys() {
  static const std::vector<TorchTitanKey> table = make_table();
  return table;
}

const TorchTitanKey* find_torchtitan_key(const std::string& dotted) {
  for (const TorchTitanKey& entry : torchtitan_keys()) {
    if (entry.use != titan_key && entry.key == dotted) return &entry;
  }
  return nullptr;
}

bool is_torchtitan_section(const std::string& prefix) {
  for (const TorchTitanKey& entry : torchtitan_keys()) {
    if (entry.use != titan_key && entry.key.starts_with(prefix + ".")) return true;
  }
  return false;
}

void apply_torchtitan_key(JobConfig& config, const TorchTitanKey& entry, const std::string& value,
                          const std::string& where) {
  switch (entry.use) {
    case titan_key:
      fail("internal error: {} is titan's own key, read by its parser", entry.key);
    case mapped:
      apply_mapped(config, entry, value, where);
      return;
    case converter_setting:
      return;
    case no_effect:
      if (value != entry.default_value) {
        add_notice(config, fmt::format("TorchTitan's {} = \"{}\" has no effect here: {}", entry.key, value, entry.why));
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
  if (config.checkpoint.async_mode == "async_with_pinned_mem") {
    config.checkpoint.async_mode = "async";
    add_notice(config,
               "checkpoint.async_mode = \"async_with_pinned_mem\" runs as \"async\" here: titan copies the state to "
               "host memory at the step boundary and writes it from a background thread; there is no separate "
               "pinned-memory mode");
  }
  resolve_token_budgets(config);
  // compile.enable, and TorchTitan's default of capturing CUDA graphs (training.disable_cuda_graphs = false), map
  // onto training.graph_capture where a whole step can be recorded once and replayed; disable_cuda_graphs = true
  // keeps it off.
  const JobConfig::TorchTitanCarry& carry = config.torchtitan;
  const bool capture = carry.disable_cuda_graphs == 0 || (carry.compile && carry.disable_cuda_graphs != 1);
  if (capture && !config.training.graph_capture) {
    if (const char* why = no_capture_reason(config)) {
      if (carry.compile) {
        add_notice(config, fmt::format("compile.enable = true has no effect here: {} (titan runs its own compiled "
                                       "kernels; on CUDA it maps to training.graph_capture, which records and "
                                       "replays whole steps)",
                                       why));
      }
      if (carry.disable_cuda_graphs == 0) {
        add_notice(config, fmt::format("training.disable_cuda_graphs = false has no effect here: {} (on CUDA it "
                                       "maps to training.graph_capture, which records and replays whole steps)",
                                       why));
      }
    } else {
      config.training.graph_capture = true;
    }
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
