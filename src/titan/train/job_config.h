// The job configuration: one struct per TOML section, keys named as
// TorchTitan names them wherever a counterpart exists, so its users feel at
// home. Defaults here are what `titan train --help` prints.
#pragma once

#include <string>
#include <vector>

#include "titan/train/config_visitor.h"

namespace titan::train {

struct JobSection {
  std::string dump_folder = "./outputs";
  std::string description = "titan training job";
  void visit(ConfigVisitor& v) {
    v.field("dump_folder", dump_folder, "folder for metrics, checkpoints and traces of this job");
    v.field("description", description, "free text describing the job");
  }
};

struct ModelSection {
  std::string name = "llama3";
  std::string flavor = "debugmodel";
  std::string hf_config = "";
  std::string tokenizer_path = "";
  int64_t vocab_size = 0;
  std::string attention = "flash";
  bool fused_loss = true;
  bool document_masking = false;
  int64_t loss_vocab_chunk = 0;
  std::string moe_expert_impl = "grouped";
  double moe_aux_loss_coef = -1.0;
  double moe_load_balance_coeff = -1.0;
  int64_t num_mtp_layers = -1;
  double mtp_scale = 0.3;
  std::vector<std::string> converters;
  void visit(ConfigVisitor& v) {
    // The lists in these help lines are checked against the registry (tests/train/documented_lists_test.cpp).
    v.field("name", name,
            "model family: llama3, qwen3, qwen3_moe, mistral, qwen2, gemma2, gemma3, olmo2, phi3, muse_glimmer, "
            "qwen3_5, deepseek_v3 or gpt_oss");
    v.field("flavor", flavor, "named size: debugmodel, 1B, 8B, ... (README.md lists each family's)");
    v.field("hf_config", hf_config,
            "a Hugging Face config.json (LlamaForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, MistralForCausalLM, "
            "Qwen2ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, Olmo2ForCausalLM, Phi3ForCausalLM, "
            "DeepseekV3ForCausalLM, GptOssForCausalLM, MuseGlimmerForConditionalGeneration, Qwen3_5ForCausalLM, "
            "Qwen3_5MoeForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration): builds "
            "that model; name and flavor follow it");
    v.field("tokenizer_path", tokenizer_path,
            "tokenizer.json, tiktoken rank file or built-in name (vocab size follows it)");
    v.field("vocab_size", vocab_size, "override the vocabulary size (0 = the tokenizer's, else the flavor's)");
    v.field("attention", attention, "attention implementation: flash or naive");
    v.field("fused_loss", fused_loss,
            "fused linear cross-entropy (logits never whole) instead of linear + cross-entropy");
    v.field("document_masking", document_masking, "mask attention across packed documents");
    v.field("loss_vocab_chunk", loss_vocab_chunk, "vocabulary columns per fused-loss tile (0 = all)");
    v.field("moe_expert_impl", moe_expert_impl,
            "mixture-of-experts layers: grouped (one grouped GEMM for all experts) or loop (one GEMM per expert)");
    v.field("moe_aux_loss_coef", moe_aux_loss_coef,
            "MoE auxiliary load-balancing loss coefficient (Hugging Face's router_aux_loss_coef; < 0: the "
            "flavor's)");
    v.field("moe_load_balance_coeff", moe_load_balance_coeff,
            "aux-loss-free balancing: per-expert bias step after every optimizer step (DeepSeek-V3; 0: off; < 0: the "
            "flavor's)");
    v.field("num_mtp_layers", num_mtp_layers,
            "multi-token prediction depths (deepseek_v3; TorchTitan's num_mtp_layers, Hugging Face's "
            "num_nextn_predict_layers), each a copy of the last layer's block; 0: off; < 0: the flavor's (0) or "
            "hf_config's");
    v.field("mtp_scale", mtp_scale,
            "weight of the multi-token prediction loss (TorchTitan's loss.mtp_scale): loss = cross-entropy + "
            "mtp_scale * mean over depths");
    v.field("converters", converters,
            "model converters, as TorchTitan's: quantize.linear.float8 (float8 training, [quantize.linear.float8]) "
            "or quantize.linear.mx (MXFP8, [quantize.linear.mx]) for Linears; quantize.grouped_mm.float8 or "
            "quantize.grouped_mm.mx for MoE experts");
  }
};

// FLUX's frozen encoders (TorchTitan's [encoder] section of its flux jobs):
// T5 and CLIP from Hugging Face folders, the autoencoder from ae.safetensors.
struct EncoderSection {
  std::string t5_encoder = "";
  std::string clip_encoder = "";
  std::string autoencoder_path = "";
  std::string autoencoder = "flux";
  int64_t max_t5_encoding_len = 256;
  bool random_init = false;
  void visit(ConfigVisitor& v) {
    v.field("t5_encoder", t5_encoder,
            "flux: the T5 encoder's Hugging Face folder (config.json, model.safetensors, tokenizer.json)");
    v.field("clip_encoder", clip_encoder,
            "flux: the CLIP text encoder's Hugging Face folder (config.json, model.safetensors, tokenizer.json)");
    v.field("autoencoder_path", autoencoder_path, "flux: the autoencoder's ae.safetensors");
    v.field("autoencoder", autoencoder,
            "flux: flux (FLUX.1's, from autoencoder_path) or block_mean (weightless: each 8x8 block's four quarter "
            "colours; the synthetic examples')");
    v.field("max_t5_encoding_len", max_t5_encoding_len, "flux: T5 tokens per caption (padded or cut to it)");
    v.field("random_init", random_init,
            "flux: draw the encoders' weights instead of loading them (tests; only config.json and tokenizer.json "
            "are read)");
  }
};

struct OptimizerSection {
  std::string name = "AdamW";
  double lr = 8e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  std::vector<std::string> no_weight_decay = {"norm", "tok_embeddings"};
  std::string state_dtype = "f32";
  void visit(ConfigVisitor& v) {
    v.field("name", name, "optimizer: AdamW");
    v.field("lr", lr, "peak learning rate");
    v.field("beta1", beta1, "AdamW beta1");
    v.field("beta2", beta2, "AdamW beta2");
    v.field("eps", eps, "AdamW epsilon");
    v.field("weight_decay", weight_decay, "decoupled weight decay");
    v.field("no_weight_decay", no_weight_decay, "parameters whose name contains any of these get no weight decay");
    v.field("state_dtype", state_dtype, "dtype of the AdamW moments: f32 or bf16");
  }
};

struct LrSchedulerSection {
  int64_t warmup_steps = 200;
  int64_t total_steps = 0;
  double decay_ratio = -1.0;
  std::string decay_type = "linear";
  double min_lr_factor = 0.0;
  void visit(ConfigVisitor& v) {
    v.field("warmup_steps", warmup_steps, "linear warmup steps");
    v.field("total_steps", total_steps,
            "steps the schedule spans (0: training.steps); later steps keep the last step's LR");
    v.field("decay_ratio", decay_ratio, "fraction of steps spent decaying at the end (< 0: all steps after warmup)");
    v.field("decay_type", decay_type, "decay shape: linear, sqrt or cosine");
    v.field("min_lr_factor", min_lr_factor, "final learning rate as a fraction of lr");
  }
};

struct TrainingSection {
  std::string dataset = "fortunes";
  std::string dataset_path = "data/fortunes";
  int64_t local_batch_size = 8;
  int64_t global_batch_size = -1;
  int64_t seq_len = 512;
  int64_t steps = 1000;
  double max_norm = 1.0;
  std::string mixed_precision_param = "f32";
  std::string mixed_precision_reduce = "f32";
  int64_t seed = 42;
  bool deterministic = false;
  bool graph_capture = false;
  std::string device = "cpu";
  bool memory_check = true;
  bool skip_nonfinite_steps = false;
  int64_t img_size = 256;
  double classifier_free_guidance_prob = 0.0;
  std::string timestep_sampling = "logit_normal";
  void visit(ConfigVisitor& v) {
    v.field("dataset", dataset, "dataset name (for logs)");
    v.field("dataset_path", dataset_path, "prepared shards folder (titan data prepare), text file or JSONL");
    v.field("local_batch_size", local_batch_size, "sequences per micro-batch on this rank");
    v.field("global_batch_size", global_batch_size,
            "sequences per optimizer step across ranks (< 0: local x data-parallel ranks); more means gradient "
            "accumulation");
    v.field("seq_len", seq_len, "tokens per sequence");
    v.field("steps", steps, "optimizer steps to train");
    v.field("max_norm", max_norm, "clip gradients to this global L2 norm (<= 0: no clipping)");
    v.field("mixed_precision_param", mixed_precision_param, "dtype parameters are computed in: f32 or bf16");
    v.field("mixed_precision_reduce", mixed_precision_reduce, "dtype gradients are reduced in: f32");
    v.field("seed", seed, "seed for initialisation and data order");
    v.field("deterministic", deterministic, "bitwise-reproducible kernels (CPU kernels always are)");
    v.field("graph_capture", graph_capture,
            "CUDA: after warm-up, record the whole step into a CUDA graph once and replay it every step");
    v.field("device", device, "cpu or cuda");
    v.field("memory_check", memory_check,
            "before allocating, refuse a job whose estimated memory per rank exceeds the device's (host RAM / GPU)");
    v.field("skip_nonfinite_steps", skip_nonfinite_steps,
            "a step whose loss or gradients hold NaN/Inf is skipped (no update) and counted, instead of stopping the "
            "job");
    v.field("img_size", img_size, "flux: image side in pixels (centre-cropped and resized to it)");
    v.field("classifier_free_guidance_prob", classifier_free_guidance_prob,
            "flux: probability that each text encoding (T5, CLIP) is independently replaced by the empty prompt's");
    v.field("timestep_sampling", timestep_sampling,
            "flux: logit_normal (sigmoid of N(0, 1), shifted by the image's size as FLUX.1) or uniform "
            "(TorchTitan's)");
  }
};

struct ParallelismSection {
  int64_t data_parallel_replicate_degree = 1;
  int64_t data_parallel_shard_degree = -1;
  int64_t tensor_parallel_degree = 1;
  int64_t pipeline_parallel_degree = 1;
  int64_t context_parallel_degree = 1;
  std::string context_parallel_rotate_method = "allgather";
  std::string context_parallel_load_balancer = "headtail";
  int64_t expert_parallel_degree = 1;
  std::string fsdp_reshard_after_forward = "default";
  std::string pipeline_parallel_schedule = "1F1B";
  std::string pipeline_parallel_schedule_csv = "";
  int64_t pipeline_parallel_microbatch_size = 1;
  int64_t pipeline_parallel_layers_per_stage = -1;
  int64_t pipeline_parallel_first_stage_less_layers = 1;
  int64_t pipeline_parallel_last_stage_less_layers = 1;
  std::vector<std::string> module_fqns_per_model_part = {};
  void visit(ConfigVisitor& v) {
    v.field("data_parallel_replicate_degree", data_parallel_replicate_degree, "HSDP/DDP replicas");
    v.field("data_parallel_shard_degree", data_parallel_shard_degree, "FSDP shards (-1: the rest of the world)");
    v.field("tensor_parallel_degree", tensor_parallel_degree, "tensor parallel degree");
    v.field("pipeline_parallel_degree", pipeline_parallel_degree, "pipeline parallel degree");
    v.field("context_parallel_degree", context_parallel_degree,
            "ranks each sequence is cut over along its length (ring attention; FSDP shards over dp_shard x cp)");
    v.field("context_parallel_rotate_method", context_parallel_rotate_method,
            "how keys/values reach every context-parallel rank: allgather, or alltoall (a ring of point-to-point "
            "passes overlapped with compute)");
    v.field("context_parallel_load_balancer", context_parallel_load_balancer,
            "headtail (rank r holds chunks r and 2cp-1-r, equal causal work) or none (contiguous slices)");
    v.field("expert_parallel_degree", expert_parallel_degree,
            "ranks the MoE experts are split over, taken from data_parallel_shard_degree (which it must divide)");
    v.field("fsdp_reshard_after_forward", fsdp_reshard_after_forward,
            "free gathered parameters after each block's forward: always, never, or default (all but the last "
            "block; never under pipeline parallelism, whose micro-batches reuse them)");
    v.field("pipeline_parallel_schedule", pipeline_parallel_schedule,
            "GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble or ZBVZeroBubble (`titan pipeline show` compares "
            "them)");
    v.field("pipeline_parallel_schedule_csv", pipeline_parallel_schedule_csv,
            "a schedule as a CSV file (one line of actions per pipeline rank, PyTorch's notation); overrides "
            "pipeline_parallel_schedule");
    v.field("pipeline_parallel_microbatch_size", pipeline_parallel_microbatch_size,
            "sequences per pipeline micro-batch (local_batch_size / this = micro-batches per step)");
    v.field("pipeline_parallel_layers_per_stage", pipeline_parallel_layers_per_stage,
            "layers per pipeline stage, setting the number of stages (-1: the schedule's stages per rank)");
    v.field("pipeline_parallel_first_stage_less_layers", pipeline_parallel_first_stage_less_layers,
            "layers fewer on the first stage, which also embeds");
    v.field("pipeline_parallel_last_stage_less_layers", pipeline_parallel_last_stage_less_layers,
            "layers fewer on the last stage, which also holds the norm, output and loss");
    v.field("module_fqns_per_model_part", module_fqns_per_model_part,
            "each stage's modules, in forward order: [[\"tok_embeddings\", \"layers.0\"], [\"layers.1\", "
            "\"norm\", \"output\"]] (on the command line: parts split by commas, modules by spaces)");
  }
};

struct CommSection {
  double timeout_seconds = 300.0;
  int64_t trace_buf_size = 20000;
  std::string save_traces_folder = "comm_traces";
  std::string mode = "default";
  int64_t fake_world_size = 0;
  int64_t fake_rank = 0;
  void visit(ConfigVisitor& v) {
    v.field("timeout_seconds", timeout_seconds,
            "a collective waiting longer than this ends every rank with a message naming the rank and collective");
    v.field("trace_buf_size", trace_buf_size,
            "flight recorder: collectives each rank remembers (0 = off), dumped on a timeout, a fatal error or "
            "SIGUSR1");
    v.field("save_traces_folder", save_traces_folder, "flight recorder dumps, under the dump folder");
    v.field("mode", mode,
            "default, or fake_backend: this one process plays rank comm.fake_rank of a job of comm.fake_world_size "
            "ranks (its real shards and compute; collectives return at once, costing nothing) and reports its "
            "memory, step time and the collectives it would issue");
    v.field("fake_world_size", fake_world_size, "fake_backend: the ranks of the job rehearsed");
    v.field("fake_rank", fake_rank, "fake_backend: the rank this process plays");
  }
};

struct CheckpointSection {
  bool enable = false;
  std::string folder = "checkpoint";
  int64_t interval = 500;
  int64_t keep_latest_k = 0;
  int64_t load_step = -1;
  bool last_save_model_only = true;
  bool last_save_in_hf = false;
  std::string export_dtype = "f32";
  std::string async_mode = "disabled";
  std::vector<std::string> exclude_from_loading = {};
  bool enable_first_step_checkpoint = false;
  bool load_only = false;
  bool create_seed_checkpoint = false;
  std::string initial_load_path = "";
  bool initial_load_model_only = true;
  bool allow_nonfinite_weights = false;
  int64_t local_interval = 0;
  std::string local_folder = "";
  int64_t local_keep_latest_k = 2;
  bool local_replica = true;
  void visit(ConfigVisitor& v) {
    v.field("enable", enable,
            "save checkpoints (every interval steps and at the last step) and resume from them; false saves nothing");
    v.field("folder", folder, "checkpoint folder, under the dump folder");
    v.field("interval", interval, "save the full training state every N steps");
    v.field("keep_latest_k", keep_latest_k, "keep only the newest K checkpoints (0 = all)");
    v.field("load_step", load_step, "step to resume from (-1 = latest complete)");
    v.field("last_save_model_only", last_save_model_only,
            "the save at the last step is the model export (weights in export_dtype, job.toml, tokenizer: what "
            "titan generate loads) instead of the full training state");
    v.field("last_save_in_hf", last_save_in_hf,
            "the last save (model only) is a Hugging Face folder (config.json, safetensors, tokenizer.json)");
    v.field("export_dtype", export_dtype, "dtype of the model weights in the last save when it is model only");
    v.field("async_mode", async_mode,
            "disabled (the step waits for the write) or async (state copied to host memory at the step boundary, "
            "written by a background thread)");
    v.field("exclude_from_loading", exclude_from_loading,
            "parts not restored on resume: model, optimizer, lr_scheduler, dataloader, train_state");
    v.field("enable_first_step_checkpoint", enable_first_step_checkpoint,
            "also save the full training state after step 1 (to check saving works early)");
    v.field("load_only", load_only, "resume from checkpoints but save none");
    v.field("create_seed_checkpoint", create_seed_checkpoint,
            "write the initial weights as step 0 and exit (one process), so every run starts from them");
    v.field("initial_load_path", initial_load_path,
            "a checkpoint step folder, a titan model export or a Hugging Face model folder whose weights start this "
            "job when there is no checkpoint to resume");
    v.field("initial_load_model_only", initial_load_model_only,
            "initial_load_path restores the model weights only; false restores a checkpoint step folder's whole "
            "training state (optimizer, LR schedule, step, data loader) but exclude_from_loading");
    v.field("allow_nonfinite_weights", allow_nonfinite_weights,
            "load weights holding NaN or Inf (each such tensor is named in a warning) instead of refusing them");
    v.field("local_interval", local_interval,
            "fast tier: every N steps each rank also keeps its whole state in host memory (local_folder), written "
            "in the background; a restart resumes from the newest step some tier holds completely (0 = off)");
    v.field("local_folder", local_folder,
            "fast tier folder (one subfolder per node name); empty = /dev/shm/titan-<hash of the dump folder>");
    v.field("local_keep_latest_k", local_keep_latest_k, "fast tier: keep the newest K steps per rank (>= 1)");
    v.field("local_replica", local_replica,
            "fast tier: also copy each rank's fast-tier state to the same local rank on the next node (needs >= 2 "
            "nodes)");
  }
};

struct ActivationCheckpointSection {
  std::string mode = "none";
  int64_t selective_every = 2;
  bool selective_ops = false;
  std::vector<std::string> per_op_sac_force_recompute_mm_shapes_by_fqns = {"moe.router.gate"};
  double memory_budget = 0.5;
  void visit(ConfigVisitor& v) {
    v.field("mode", mode,
            "none, full (every block), selective (every N-th block, or per op), offload, or memory_budget (the plan "
            "memory_budget picks)");
    v.field("selective_every", selective_every, "with mode = selective, checkpoint every N-th block");
    v.field("selective_ops", selective_ops,
            "with mode = selective: checkpoint every block keeping the outputs TorchTitan's per-op policy keeps "
            "(attention, the sequence-parallel reduce-scatter, every other matmul) instead of every N-th block whole "
            "(TorchTitan's selective_ac_option = \"op\")");
    v.field("per_op_sac_force_recompute_mm_shapes_by_fqns", per_op_sac_force_recompute_mm_shapes_by_fqns,
            "with selective_ops: Linears whose name contains one of these are always recomputed");
    v.field("memory_budget", memory_budget,
            "with mode = memory_budget: the share of activation memory to keep, 0 (as much recomputation as full "
            "checkpointing) to 1 (none): titan picks the plan keeping the most activations within it");
  }
};

struct MetricsSection {
  int64_t log_freq = 1;
  double peak_tflops = 0.0;
  bool progress = true;
  bool stop_on_write_error = false;
  bool enable_tensorboard = false;
  std::string save_tb_folder = "tb";
  void visit(ConfigVisitor& v) {
    v.field("log_freq", log_freq, "print and record metrics every N steps");
    v.field("peak_tflops", peak_tflops, "device peak for MFU (0 = table for GPUs, measured GEMM peak on CPU)");
    v.field("progress", progress, "show elapsed time and ETA on the metrics line");
    v.field("stop_on_write_error", stop_on_write_error,
            "when metrics.jsonl cannot be written (a full disk): stop the job with the error, instead of warning "
            "once and keeping the metrics on the console");
    v.field("enable_tensorboard", enable_tensorboard, "also write every metric as a TensorBoard scalar (rank 0)");
    v.field("save_tb_folder", save_tb_folder, "TensorBoard event files, under the dump folder");
  }
};

struct ProfilingSection {
  bool enable_profiling = false;
  std::string save_traces_folder = "profile_traces";
  int64_t profile_freq = 10;
  bool enable_memory_snapshot = false;
  std::string save_memory_snapshot_folder = "memory_snapshot";
  void visit(ConfigVisitor& v) {
    v.field("enable_profiling", enable_profiling,
            "every profile_freq steps, each rank writes a Chrome trace (ops, backward nodes, collectives, spans)");
    v.field("save_traces_folder", save_traces_folder, "profiler traces, under the dump folder");
    v.field("profile_freq", profile_freq, "profile every N-th step");
    v.field("enable_memory_snapshot", enable_memory_snapshot,
            "record allocations; every profile_freq steps and on out-of-memory write a snapshot (JSON + HTML page)");
    v.field("save_memory_snapshot_folder", save_memory_snapshot_folder, "memory snapshots, under the dump folder");
  }
};

struct ValidationSection {
  bool enable = false;
  int64_t freq = 100;
  int64_t steps = 4;
  double split = 0.01;
  bool enable_classifier_free_guidance = false;
  double classifier_free_guidance_scale = 5.0;
  int64_t denoising_steps = 50;
  int64_t save_img_count = 1;
  std::string save_img_folder = "img";
  bool all_timesteps = false;
  std::string dataset_path;
  void visit(ConfigVisitor& v) {
    v.field("enable", enable, "evaluate on the held-out split");
    v.field("freq", freq, "validate every N steps");
    v.field("steps", steps, "validation batches per evaluation");
    v.field("split", split, "fraction of documents held out for validation");
    v.field("enable_classifier_free_guidance", enable_classifier_free_guidance,
            "flux: validation images sampled with classifier-free guidance");
    v.field("classifier_free_guidance_scale", classifier_free_guidance_scale, "flux: the guidance scale");
    v.field("denoising_steps", denoising_steps, "flux: Euler steps per validation image");
    v.field("save_img_count", save_img_count,
            "flux: validation images sampled and saved per evaluation (their captions: the first of the split)");
    v.field("save_img_folder", save_img_folder, "flux: where, under job.dump_folder");
    v.field("all_timesteps", all_timesteps,
            "flux: the loss of every sample at all 8 stratified timesteps, instead of one each in turn");
    v.field("dataset_path", dataset_path,
            "flux: a captions.jsonl to validate on, encoded on the fly (with training.dataset_path a captions.jsonl)");
  }
};

// LoRA fine-tuning (models/lora_plan.h): low-rank adapters on the chosen
// projections train, every base weight stays frozen.
// TorchTitan's [quantize.linear.float8] and [quantize.linear.mx] tables,
// read when model.converters names them (models/float8_plan.h); the keys
// keep TorchTitan's dotted names under [quantize]; so do the grouped-GEMM
// tables the quantize.grouped_mm converters read.
struct QuantizeSection {
  bool float8_fsdp_all_gather = false;
  bool float8_precompute_scale = false;
  std::string float8_recipe_name = "";
  std::vector<std::string> float8_filter_fqns;
  bool float8_emulate = false;
  std::string mx_dim1_cast_kernel_choice = "triton";
  std::string mx_recipe_name = "mxfp8_cublas";
  std::vector<std::string> mx_filter_fqns{"output"};
  std::vector<std::string> grouped_float8_fqns;
  std::string grouped_mx_recipe_name = "mxfp8";
  std::vector<std::string> grouped_mx_fqns;
  void visit(ConfigVisitor& v) {
    v.field("linear.float8.enable_fsdp_float8_all_gather", float8_fsdp_all_gather,
            "FSDP all-gathers the converted Linears' weights as float8 (cast from the f32 master, tensorwise)");
    v.field("linear.float8.precompute_float8_dynamic_scale_for_fsdp", float8_precompute_scale,
            "compute the all-gathered weights' scales once per step (only with enable_fsdp_float8_all_gather)");
    v.field("linear.float8.recipe_name", float8_recipe_name,
            "tensorwise, rowwise or rowwise_with_gw_hp (\"\": tensorwise)");
    v.field("linear.float8.filter_fqns", float8_filter_fqns,
            "Linears whose name contains one of these stay high precision; auto_filter_small_kn adds torchao's size "
            "thresholds");
    v.field("linear.float8.emulate", float8_emulate,
            "true: the float8 GEMMs as exact bf16 GEMMs of the fp8 values (the CPU always); false: cuBLASLt's FP8 "
            "GEMMs on GPUs of compute capability 8.9 or later");
    v.field("linear.mx.mxfp8_dim1_cast_kernel_choice", mx_dim1_cast_kernel_choice,
            "triton, cuda or torch: which kernel casts along dim 1 in TorchTitan; titan has one cast kernel");
    v.field("linear.mx.recipe_name", mx_recipe_name, "mxfp8_cublas (or mxfp8): e4m3 in blocks of 32, e8m0 scales");
    v.field("linear.mx.filter_fqns", mx_filter_fqns, "Linears whose name contains one of these stay high precision");
    v.field("grouped_mm.float8.fqns", grouped_float8_fqns,
            "MoE experts whose name contains one of these run float8 rowwise grouped GEMMs (e.g. experts)");
    v.field("grouped_mm.mx.recipe_name", grouped_mx_recipe_name, "mxfp8: e4m3 in blocks of 32, RCEIL e8m0 scales");
    v.field("grouped_mm.mx.fqns", grouped_mx_fqns,
            "MoE experts whose name contains one of these run MXFP8 grouped GEMMs (e.g. experts)");
  }
};

struct LoraSection {
  bool enable = false;
  int64_t rank = 8;
  double alpha = 16.0;
  double dropout = 0.0;
  std::vector<std::string> target_modules{"q", "k", "v", "o"};
  void visit(ConfigVisitor& v) {
    v.field("enable", enable, "train LoRA adapters instead of the whole model (the base weights stay frozen)");
    v.field("rank", rank, "rank r of each adapter (A is [r, in], B is [out, r])");
    v.field("alpha", alpha, "the adapters' output is scaled by alpha / rank");
    v.field("dropout", dropout, "dropout probability on the adapters' input (training steps only)");
    v.field("target_modules", target_modules,
            "projections to adapt: q, k, v, o, gate, up, down (or q_proj, ..., down_proj)");
  }
};

// Supervised fine-tuning on chat data (data/chat_dataset.h). The strings
// are parsed once, by chat_options() in config_loader.h.
struct ChatSection {
  bool enable = false;
  std::string template_name = "";  // the key is "template" (a C++ keyword)
  std::string train_on = "assistant";
  std::string overlong = "truncate";
  void visit(ConfigVisitor& v) {
    v.field("enable", enable,
            "the dataset is chat conversations (JSONL messages or prompt/completion, or shards from titan data "
            "prepare --chat): rendered by the chat template, packed whole, trained on assistant tokens");
    v.field("template", template_name,
            "chat template: llama3, qwen3, a tokenizer_config.json or a .jinja file (\"\": the "
            "tokenizer_config.json beside model.tokenizer_path)");
    v.field("train_on", train_on, "tokens trained on: assistant (the assistant turns) or all");
    v.field("overlong", overlong,
            "a conversation longer than training.seq_len: truncate (keep its first tokens) or drop");
  }
};

struct FaultToleranceSection {
  bool enable = false;
  std::string process_group = "gloo";
  int64_t process_group_timeout_ms = 10000;
  int64_t replica_id = 0;
  int64_t group_size = 0;
  int64_t min_replica_size = 1;
  std::string semi_sync_method = "";
  void visit(ConfigVisitor& v) {
    v.field("enable", enable,
            "this job is one replica group of a fault-tolerant job: gradients are averaged with the other live groups "
            "each step through a quorum kept by `titan lighthouse` (TORCHFT_LIGHTHOUSE=host:port); a dead group is "
            "left out, a restarted one fetches the state from a live peer (docs/fault-tolerance.md)");
    v.field("process_group", process_group, "the cross-group transport: gloo (TCP; nccl is not built)");
    v.field("process_group_timeout_ms", process_group_timeout_ms,
            "a cross-group collective or rendezvous waiting longer than this counts its peers as lost");
    v.field("replica_id", replica_id, "this group's id, 0 .. group_size - 1 (its data shard)");
    v.field("group_size", group_size,
            "the number of replica groups: the data is sharded over dp ranks x group_size (TorchTitan's meaning)");
    v.field("min_replica_size", min_replica_size, "fewest live replica groups a step may run with (it waits for more)");
    v.field("semi_sync_method", semi_sync_method, "local_sgd or diloco in TorchTitan: not built here (must be empty)");
  }
};

struct JobConfig {
  JobSection job;
  ModelSection model;
  EncoderSection encoder;
  OptimizerSection optimizer;
  LrSchedulerSection lr_scheduler;
  TrainingSection training;
  ParallelismSection parallelism;
  CommSection comm;
  CheckpointSection checkpoint;
  ActivationCheckpointSection activation_checkpoint;
  MetricsSection metrics;
  ValidationSection validation;
  ProfilingSection profiling;
  ChatSection chat;
  LoraSection lora;
  QuantizeSection quantize;
  FaultToleranceSection fault_tolerance;

  // What TorchTitan keys (train/torchtitan_keys.h) left to resolve once the
  // command line's overrides are in (resolve_torchtitan_keys); not sections,
  // so not written to job.toml.
  struct TorchTitanCarry {
    std::string hf_assets_path;
    bool initial_load_in_hf = false;
    bool compile = false;  // compile.enable: training.graph_capture where it applies
    // training.disable_cuda_graphs: -1 unset, 0 false (capture where it applies), 1 true (no capture).
    int64_t disable_cuda_graphs = -1;
    int64_t tokens_per_microbatch = 0;  // training.num_tokens_per_microbatch_per_dp_rank (0: unset)
    int64_t tokens_per_train_step = 0;  // training.num_tokens_per_train_step (0: unset; -1: no accumulation)
    int64_t pp_microbatches = 0;        // parallelism.num_pp_microbatches (0: unset)
  } torchtitan;
  // One line per TorchTitan key set to a value that has no effect here, printed at start-up.
  std::vector<std::string> notices;

  // Calls f(section_name, section) for each section in file order.
  template <typename F>
  void for_each_section(F&& f) {
    f("job", job);
    f("model", model);
    f("encoder", encoder);
    f("optimizer", optimizer);
    f("lr_scheduler", lr_scheduler);
    f("training", training);
    f("parallelism", parallelism);
    f("comm", comm);
    f("checkpoint", checkpoint);
    f("activation_checkpoint", activation_checkpoint);
    f("metrics", metrics);
    f("validation", validation);
    f("profiling", profiling);
    f("chat", chat);
    f("lora", lora);
    f("quantize", quantize);
    f("fault_tolerance", fault_tolerance);
  }
};

}  // namespace titan::train
