// A job's whole training state in a PyTorch Distributed Checkpoint folder,
// laid out as TorchTitan (v0.2.2) saves its step folders: the model's state
// dict at the top level, AdamW's state and hyper-parameters under
// get_optimizer_state_dict's flattened keys ("optimizer.state.<fqn>.exp_avg",
// "optimizer.param_groups.<fqn>.lr"), the LambdaLR's state_dict as
// "lr_scheduler.<attribute>", and "train_state.step" / ".ntokens_seen".
// Both ways: `titan convert --from titan STEP_FOLDER --to dcp`, and
// checkpoint.initial_load_path at a DCP folder with initial_load_model_only = false.
#pragma once

#include <string>
#include <vector>

#include "titan/train/hf_convert.h"
#include "titan/train/training_state.h"

namespace titan::train {

// The items titan adds beside TorchTitan's, which TorchTitan never asks for:
// titan's own job state (RNG, schedule, mesh: JSON text) and its data
// loaders' cursors (JSON text), so a titan job resumes from a DCP folder
// exactly as from its own checkpoint.
inline constexpr const char* kDcpTitanStateKey = "train_state.titan_state";
inline constexpr const char* kDcpTitanLoaderKey = "dataloader.titan_state";

// TorchTitan's key of a parameter's AdamW state ("exp_avg", "exp_avg_sq",
// "step") and of its parameter group's hyper-parameter ("lr", "betas", ...).
std::string dcp_optimizer_state_key(const std::string& fqn, const std::string& state);
std::string dcp_param_group_key(const std::string& fqn, const std::string& hyper_parameter);

// A titan training checkpoint's step folder (metadata.json + COMPLETE) as a
// one-rank DCP folder of its model, AdamW state, schedule and train state as
// TorchTitan names them, with titan's own items and its job.toml beside.
// Every tensor keeps its dtype and bits.
void convert_titan_checkpoint_to_dcp(const std::string& step_folder, const std::string& output,
                                     const ConvertOptions& options);

// checkpoint.initial_load_path at a DCP folder with initial_load_model_only =
// false. The weights were read as the model was built (build_job_model);
// this restores the rest of `parts`: this rank's boxes of AdamW's moments
// (`tensors`: the job's state tensors) and its step count, the training step
// (which is titan's LR schedule position: it must equal the scheduler's
// last_epoch), and, where titan wrote the folder, the RNG and the data
// position. A folder that does not hold AdamW's state of exactly this model
// (a missing or extra moment, another shape, another optimizer's state) is
// refused naming the item.
void load_dcp_training_state(const std::string& folder, const std::vector<std::string>& parts,
                             const std::vector<StateTensor>& tensors, const JobConfig& config,
                             const comm::DeviceMesh& mesh, TrainingState::Parts& state);

}  // namespace titan::train
