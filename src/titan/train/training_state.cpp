#include "titan/train/training_state.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/dcp_folder.h"
#include "titan/checkpoint/nonfinite_weights.h"
#include "titan/core/copy.h"
#include "titan/core/units.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/lora_merge_stream.h"
#include "titan/models/lora_plan.h"
#include "titan/train/dcp_training_state.h"
#include "titan/train/hf_convert.h"
#include "titan/train/model_export.h"

namespace titan::train {
namespace {

using comm::MeshDim;
using Clock = SteadyClock;

// A parameter's AdamW moment as the checkpoint names it.
std::string moment_name(const char* moment, const std::string& parameter) {
  return fmt::format("optimizer.{}.{}", moment, parameter);
}

}  // namespace

TrainingState::TrainingState(const JobConfig& config, const comm::DeviceMesh& mesh, Device device, Parts parts)
    : config_(config),
      mesh_(mesh),
      device_(device),
      parts_(parts),
      rank_(mesh.coordinate(MeshDim::world)),
      checkpointer_(config, mesh),
      fast_tier_(config, mesh) {}

std::vector<StateTensor> state_tensors_of(nn::Module& model, const optim::AdamW& optimizer,
                                          const comm::DeviceMesh& mesh) {
  // Replicas of a box (over dp_replicate, and over tp for parameters tensor
  // parallelism does not split) are saved by their first holder only.
  const bool first_replica = mesh.coordinate(MeshDim::dp_replicate) == 0;
  const bool first_tp = mesh.coordinate(MeshDim::tp) == 0;
  const std::map<std::string, Tensor> moments = optimizer.state_tensors();
  std::vector<StateTensor> tensors;
  for (auto& [name, parameter] : model.named_parameters()) {
    StateTensor t;
    t.name = "model." + name;
    t.part = "model";
    t.tensor = parameter->data;
    t.global_shape = parameter->layout.sharded() ? parameter->layout.global_shape : parameter->data.shape();
    t.offsets = parameter->layout.sharded() ? parameter->layout.offsets
                                            : std::vector<int64_t>(parameter->data.shape().size(), 0);
    t.write = first_replica && (parameter->tensor_parallel_dim >= 0 || first_tp);
    tensors.push_back(t);
    for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
      // Frozen parameters (LoRA's base) have no moments.
      const auto found = moments.find(fmt::format("{}.{}", moment, name));
      if (found == moments.end()) continue;
      StateTensor m = t;
      m.name = moment_name(moment, name);
      m.part = "optimizer";
      m.tensor = found->second;
      tensors.push_back(m);
    }
  }
  // Buffers that are model state (the MoE expert bias): whole and alike on every rank, saved by the first.
  const bool first_rank = mesh.coordinate(MeshDim::dp_cp) == 0 && first_tp;
  for (auto& [name, buffer] : model.named_persistent_buffers()) {
    tensors.push_back({"model." + name, "model", *buffer, buffer->shape(),
                       std::vector<int64_t>(buffer->shape().size(), 0), first_rank});
  }
  return tensors;
}

std::vector<StateTensor> TrainingState::state_tensors() {
  return state_tensors_of(*parts_.job.model, parts_.optimizer, mesh_);
}

nlohmann::json TrainingState::job_state(const std::vector<std::string>& contents) const {
  const comm::ParallelDims& dims = mesh_.dims();
  return {{"contents", contents},
          {"train_state", {{"step", parts_.step}}},
          {"optimizer", {{"steps_taken", parts_.optimizer.steps_taken()}}},
          // The schedule is a function of the step and these; they are recorded to flag a changed schedule.
          {"lr_scheduler",
           {{"warmup_steps", parts_.schedule.warmup_steps},
            {"total_steps", parts_.schedule.total_steps},
            {"decay_ratio", parts_.schedule.decay_ratio},
            {"decay_type", parts_.schedule.decay_type},
            {"min_lr_factor", parts_.schedule.min_lr_factor}}},
          {"rng", {{"seed", parts_.generator.seed()}, {"offset", parts_.generator.offset()}}},
          {"mesh",
           {{"world", mesh_.size(MeshDim::world)},
            {"dp_replicate", dims.dp_replicate},
            {"dp_shard", dims.dp_shard},
            {"tp", dims.tp},
            {"ep", dims.ep}}}};
}

nlohmann::json TrainingState::rank_state() const {
  if (parts_.loader == nullptr) return nlohmann::json::object();
  return {{"dp_rank", mesh_.coordinate(MeshDim::dp)}, {"dataloader", parts_.loader->state_dict()}};
}

double TrainingState::save(bool async) {
  return checkpointer_.save(parts_.step, state_tensors(),
                            job_state({"model", "optimizer", "lr_scheduler", "dataloader", "train_state"}),
                            rank_state(), async);
}

FastTier::Cost TrainingState::save_fast() {
  // Every box this rank holds, replicas included: a rank restores from its fast tier alone.
  std::vector<StateTensor> tensors = state_tensors();
  for (StateTensor& t : tensors) t.write = true;
  return fast_tier_.save(parts_.step, tensors,
                         job_state({"model", "optimizer", "lr_scheduler", "dataloader", "train_state"}), rank_state());
}

void TrainingState::load_newest() {
  const CheckpointSection& c = config_.checkpoint;
  std::vector<std::string> parts;
  for (const char* part : {"model", "optimizer", "lr_scheduler", "dataloader", "train_state"}) {
    if (std::find(c.exclude_from_loading.begin(), c.exclude_from_loading.end(), part) == c.exclude_from_loading.end())
      parts.emplace_back(part);
  }
  if (c.enable && !c.create_seed_checkpoint) {
    const checkpoint::CheckpointScan scan = checkpoint::scan_checkpoints(checkpointer_.root());
    // An incomplete step folder is what an earlier save of this job left when
    // it was killed (this job holds the dump folder's lock, so no other job is
    // writing it): it is removed once, not warned about at every resume.
    for (const std::string& folder : scan.incomplete) {
      if (rank_ != 0) continue;
      std::error_code error;
      std::filesystem::remove_all(folder, error);
      if (error) {
        std::printf("titan: warning: ignoring incomplete checkpoint %s (no COMPLETE marker); removing it failed: %s\n",
                    folder.c_str(), error.message().c_str());
      } else {
        std::printf("titan: removed incomplete checkpoint %s (an interrupted save; no COMPLETE marker)\n",
                    folder.c_str());
      }
    }
    int64_t step = scan.complete.empty() ? -1 : scan.complete.back();
    if (c.load_step >= 0) {
      TITAN_CHECK(std::find(scan.complete.begin(), scan.complete.end(), c.load_step) != scan.complete.end(),
                  "checkpoint.load_step {}: no complete checkpoint {} in {}", c.load_step,
                  checkpoint::step_folder_name(c.load_step), checkpointer_.root());
      step = c.load_step;
    }
    // The fast tiers are newer than the persistent checkpoint when they hold
    // anything (checkpoint.load_step names a persistent step, and
    // exclude_from_loading a partial load: the persistent tier serves those).
    // The time to recover is the slowest rank's, from when every rank is up (not the launch skew).
    const auto world_barrier = [&] {
      if (fast_tier_.enabled()) mesh_.group(MeshDim::world)->barrier();
    };
    world_barrier();
    const auto recover_start = Clock::now();
    if (fast_tier_.enabled() && c.load_step < 0 && c.exclude_from_loading.empty()) {
      const RestartChoice choice = fast_tier_.choose(step);
      if (choice.tier == RestoreSource::own || choice.tier == RestoreSource::replica) {
        const FastTier::Restored restored = fast_tier_.restore(choice, state_tensors());
        fast_tier_.forget_after(choice.step);
        apply_state(restored.state, restored.state.at("contents").get<std::vector<std::string>>(), parts,
                    restored.folder);
        resumed_step_ = parts_.step;
        loaded_from_ = restored.folder;
        restart_tier_ = choice.tier == RestoreSource::own ? "fast" : "replica";
        world_barrier();
        recover_seconds_ = seconds_since(recover_start);
        if (rank_ == 0) {
          std::printf("titan: resumed at step %lld from %s (%.2f s)\n", static_cast<long long>(parts_.step),
                      restored.description.c_str(), recover_seconds_);
          std::fflush(stdout);
        }
        return;
      }
      fast_tier_.forget_after(step);  // resuming from the persistent tier (or afresh: step -1)
    }
    if (step >= 0) {
      load((std::filesystem::path(checkpointer_.root()) / checkpoint::step_folder_name(step)).string(), parts);
      resumed_step_ = parts_.step;
      restart_tier_ = "persistent";
      world_barrier();
      recover_seconds_ = seconds_since(recover_start);
      if (rank_ == 0 && fast_tier_.enabled()) {
        std::printf(
            "titan: resumed at step %lld from the persistent checkpoint (%.2f s; the fast tier held no newer "
            "step every rank could restore)\n",
            static_cast<long long>(parts_.step), recover_seconds_);
        std::fflush(stdout);
      }
      return;
    }
  }
  // A DCP folder's weights were read as the model was built too; with
  // initial_load_model_only = false the rest of TorchTitan's training state here.
  if (!c.initial_load_path.empty() && !c.initial_load_model_only && checkpoint::is_dcp_folder(c.initial_load_path)) {
    load_dcp_training_state(c.initial_load_path, parts, state_tensors(), config_, mesh_, parts_);
    return;
  }
  // An HF folder or a model export was read into the model as it was built
  // (build_job_model); a titan step folder is read here: its weights, or with
  // initial_load_model_only = false its whole training state.
  if (!c.initial_load_path.empty() && !models::is_hf_model_folder(c.initial_load_path) &&
      !is_model_export_folder(c.initial_load_path) && !checkpoint::is_dcp_folder(c.initial_load_path))
    load(c.initial_load_path, c.initial_load_model_only ? std::vector<std::string>{"model"} : parts);
}

void TrainingState::resume() {
  load_newest();
  start_step_ = parts_.step;
  // Loaded weights holding NaN or Inf are refused before the first step
  // (each rank checks what it holds: its shards, its stages).
  const std::string loaded_from =
      !loaded_from_.empty() ? loaded_from_
      : resumed_step_ >= 0
          ? (std::filesystem::path(checkpointer_.root()) / checkpoint::step_folder_name(resumed_step_)).string()
          : config_.checkpoint.initial_load_path;
  if (loaded_from.empty()) return;
  std::vector<std::pair<std::string, Tensor>> weights;
  for (auto& [name, parameter] : parts_.job.model->named_parameters()) weights.emplace_back(name, parameter->data);
  checkpoint::check_finite_weights(weights, loaded_from, config_.checkpoint.allow_nonfinite_weights,
                                   "--checkpoint.allow_nonfinite_weights");
}

void TrainingState::save_seed() {
  std::vector<StateTensor> model_only;
  for (StateTensor& t : state_tensors()) {
    if (t.part == "model") model_only.push_back(std::move(t));
  }
  checkpointer_.save(0, model_only, job_state({"model"}), rank_state(), /*async=*/false);
}

void TrainingState::load(const std::string& folder, const std::vector<std::string>& parts) {
  const auto start = Clock::now();
  // A pipeline rank holds its stages' tensors; the checkpoint may hold any of the whole model's.
  std::set<std::string> model_names;
  if (parts_.job.pipeline) {
    const std::shared_ptr<models::Decoder> whole = parts_.job.model->config.build(Device::meta());
    for (const auto& [name, tensor] : whole->named_state()) model_names.insert("model." + name);
    for (const auto& [name, parameter] : whole->named_parameters()) {
      for (const char* moment : {"exp_avg", "exp_avg_sq"}) model_names.insert(moment_name(moment, name));
    }
  }
  std::vector<StateTensor> tensors = state_tensors();
  // A LoRA job's initial load of model weights is its base model: the adapters start fresh.
  if (config_.lora.enable && folder == config_.checkpoint.initial_load_path &&
      config_.checkpoint.initial_load_model_only) {
    std::erase_if(tensors, [](const StateTensor& t) { return t.name.find(".lora_") != std::string::npos; });
  }
  const Checkpointer::Loaded loaded =
      Checkpointer::load(folder, tensors, parts, parts_.job.pipeline ? &model_names : nullptr);
  apply_state(loaded.state, loaded.contents, parts, folder);
  if (rank_ == 0) {
    std::printf("titan: loaded %s from %s (step %lld, %.3f GB read by rank 0 in %.2f s)\n",
                fmt::format("{}", fmt::join(parts, ", ")).c_str(), folder.c_str(), static_cast<long long>(parts_.step),
                static_cast<double>(loaded.bytes_read) / 1e9, seconds_since(start));
    std::fflush(stdout);
  }
}

void TrainingState::apply_state(const nlohmann::json& state, const std::vector<std::string>& contents,
                                const std::vector<std::string>& parts, const std::string& folder) {
  auto use = [&](const char* part) {
    return std::find(parts.begin(), parts.end(), part) != parts.end() &&
           std::find(contents.begin(), contents.end(), part) != contents.end();
  };
  if (use("train_state")) {
    parts_.step = state.at("train_state").at("step").get<int64_t>();
    parts_.generator.set_state(state.at("rng").at("seed").get<uint64_t>(),
                               state.at("rng").at("offset").get<uint64_t>());
  }
  if (use("optimizer")) parts_.optimizer.set_steps_taken(state.at("optimizer").at("steps_taken").get<int64_t>());
  if (use("lr_scheduler") && rank_ == 0) {
    const nlohmann::json& saved = state.at("lr_scheduler");
    if (saved.at("warmup_steps") != parts_.schedule.warmup_steps ||
        saved.at("total_steps") != parts_.schedule.total_steps ||
        saved.at("decay_ratio") != parts_.schedule.decay_ratio ||
        saved.at("decay_type") != parts_.schedule.decay_type ||
        saved.at("min_lr_factor") != parts_.schedule.min_lr_factor) {
      std::printf("titan: warning: %s was saved with LR schedule %s; this job's differs (the new one applies)\n",
                  folder.c_str(), saved.dump().c_str());
    }
  }
  if (use("dataloader") && parts_.loader != nullptr) {
    // The loader state is a cursor into the global row stream, the same on
    // every data-parallel rank (data_loader.h), so any dp degree can take it.
    const nlohmann::json& loaders = state.at("dataloader");
    const std::string mine = std::to_string(mesh_.coordinate(MeshDim::dp));
    const nlohmann::json& chosen = loaders.contains(mine) ? loaders.at(mine) : loaders.begin().value();
    for (const auto& [dp_rank, other] : loaders.items()) {
      TITAN_CHECK(other == chosen, "{}: data loader states of dp ranks {} and {} differ", folder, dp_rank, mine);
    }
    try {
      parts_.loader->load_state_dict(chosen);
    } catch (const Error& error) {
      // The loader knows its own fields; the job's keys that set them are named here.
      fail(
          "{}: {}. The dataloader state depends on training.dataset_path, training.seed, validation.enable and "
          "validation.split (and the tokenizer's BOS/EOS, and chat.enable): set them as the run that saved it did, "
          "or start the data afresh with checkpoint.exclude_from_loading = [\"dataloader\"]",
          folder, error.what());
    }
  }
}

void TrainingState::finish() {
  checkpointer_.wait();
  fast_tier_.wait();
  const CheckpointSection& c = config_.checkpoint;
  // TorchTitan's last save: nothing without checkpoints or with load_only,
  // and nothing when no step ran since the load (what was loaded is there).
  if (!c.enable || c.load_only || parts_.step == start_step_) return;
  const std::string folder =
      (std::filesystem::path(checkpointer_.root()) / checkpoint::step_folder_name(parts_.step)).string();
  if (!c.last_save_model_only) {
    save(/*async=*/false);  // the full state, as at every interval
    return;
  }
  const DType dtype = parse_dtype(c.export_dtype);
  // The model-only last save is the model export, or with last_save_in_hf
  // the Hugging Face folder converted from it (written beside the step
  // folder, then removed). The export streams: the parameters are gathered
  // one FSDP unit at a time and written as they come. Rank 0 writes them, or
  // under pipeline parallelism each stage's first rank writes its stages'
  // tensors into the same file, so no rank holds the whole model.
  const std::string export_folder = c.last_save_in_hf ? folder + ".export" : folder;
  parallel::ParallelizedModel& parallelized = *parts_.job.parallelized;
  models::Decoder& model = *parts_.job.model;
  ExportWriters who;
  who.creates = rank_ == 0;
  who.writes =
      mesh_.coordinate(MeshDim::dp) == 0 && mesh_.coordinate(MeshDim::cp) == 0 && mesh_.coordinate(MeshDim::tp) == 0;
  if (parts_.job.pipeline) who.barrier = [&] { mesh_.group(MeshDim::world)->barrier(); };
  // With LoRA (never under pipeline parallelism) the export holds the merged
  // weights (a plain model, for generate and for Hugging Face), merged as
  // they come by, and <export>/adapter the PEFT adapter alone.
  const bool lora = config_.lora.enable;
  std::optional<models::LoraMergeStream> merge;
  if (lora && who.writes) merge.emplace(model);
  const FullParameters each_full = [&](const auto& use) {
    if (!merge) {
      parallelized.for_each_full_parameter(model, use);
      return;
    }
    parallelized.for_each_full_parameter(
        model, [&](nn::Parameter* parameter, const Tensor& full) { merge->take(parameter, full, use); });
    merge->check_done();
  };
  // Families whose HF tensors fuse projections (Phi-3) have no PEFT form of titan's adapters: merged weights only.
  const bool write_peft = lora && models::peft_adapter_supported(config_.model.name);
  export_model_streamed(model, config_, export_folder, dtype, each_full, who);
  if (who.creates && write_peft && merge) {
    const LoraSection& l = config_.lora;
    const std::string base = !c.initial_load_path.empty()
                                 ? c.initial_load_path
                                 : fmt::format("{}/{}", config_.model.name, config_.model.flavor);
    models::write_peft_adapter((std::filesystem::path(export_folder) / "adapter").string(), merge->adapters(),
                               model.config, config_.model.name, {l.rank, l.alpha, l.dropout, l.target_modules}, base,
                               dtype);
  }
  if (rank_ != 0) return;
  if (c.last_save_in_hf) {
    ConvertOptions options;
    options.allow_nonfinite = true;  // the trained weights are what they are: named in a warning, not refused
    convert_titan_to_hf(export_folder, folder, options);
    const std::filesystem::path adapter = std::filesystem::path(export_folder) / "adapter";
    if (std::filesystem::is_directory(adapter)) {
      std::filesystem::rename(adapter, std::filesystem::path(folder) / "adapter");
    }
    std::filesystem::remove_all(export_folder);
    std::printf(
        "titan: model written to %s as a Hugging Face folder (checkpoint.initial_load_path or titan convert "
        "--from hf read it)\n",
        folder.c_str());
  } else {
    std::printf("titan: model written to %s (titan generate --checkpoint %s --prompt ...)\n", folder.c_str(),
                folder.c_str());
  }
  if (write_peft) std::printf("titan: LoRA adapter (PEFT) written to %s/adapter\n", folder.c_str());
  if (lora && !write_peft) {
    std::printf("titan: no PEFT adapter written: %s fuses its projections in Hugging Face's format\n",
                config_.model.name.c_str());
  }
}

}  // namespace titan::train
