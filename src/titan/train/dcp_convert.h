// PyTorch Distributed Checkpoint folders (TorchTitan's step folders) as a
// source and a destination of model weights: `titan convert --from dcp` /
// `--to dcp`, and checkpoint.initial_load_path naming a DCP folder. TorchTitan
// saves the model's state dict at the top level of the checkpoint
// ("tok_embeddings.weight", "layers.0.attention.wq.weight", ...: titan's own
// parameter names), beside its other Stateful objects' items ("optimizer.",
// "lr_scheduler.", "dataloader.", "train_state."), which model loads skip.
#pragma once

#include <string>
#include <vector>

#include "titan/checkpoint/dcp_folder.h"
#include "titan/models/decoder.h"
#include "titan/train/hf_convert.h"

namespace titan::train {

// Whether a DCP item belongs to TorchTitan's non-model state (not a model weight).
bool is_dcp_training_state_key(const std::string& key);

// A titan model export (or a folder with job.toml + model.safetensors) as a
// one-rank DCP folder of its model weights, with the export's job.toml
// copied beside them (DCP ignores other files; titan reads it back). A
// training checkpoint's step folder converts with its whole training state
// (dcp_training_state.h).
void convert_titan_to_dcp(const std::string& titan_folder, const std::string& output, const ConvertOptions& options);
// Writes a converted DCP folder at `output`: `sources` and `objects`
// (write_dcp_folder) with `job_toml` copied beside them, in a staging folder
// published once complete (core/staging_folder.h): a failed conversion leaves
// nothing, and an existing `output` is replaced only then.
void publish_dcp_folder(const std::string& output, const checkpoint::TensorSources& sources,
                        const std::vector<checkpoint::DcpObject>& objects, const std::string& job_toml);
// A DCP folder's model weights as a titan model export (its training state,
// if any, stays behind: an export holds weights only). The model is the one
// `job_config` (a titan or TorchTitan TOML) describes, else the folder's own
// job.toml; its vocabulary defaults to the embedding's rows.
void convert_dcp_to_titan(const std::string& dcp_folder, const std::string& output, const std::string& job_config,
                          const ConvertOptions& options);

// Copies a DCP folder's model weights into `model` (cast to its dtypes): every
// model tensor must be there with its shape; a rank holding shards reads only
// its boxes (of whichever ranks' chunks they meet). LoRA adapters keep their values.
void load_dcp_weights_into(models::Decoder& model, const std::string& folder);

}  // namespace titan::train
