#include "titan/train/job_paths.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/error.h"
#include "titan/core/path_overlap.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/train/model_export.h"

namespace titan::train {

namespace fs = std::filesystem;

namespace {

struct JobPath {
  std::string key;  // the config key that names it
  fs::path path;
};

// Every output the job writes, under the dump folder.
std::vector<JobPath> output_folders(const JobConfig& c) {
  const fs::path dump(c.job.dump_folder);
  std::vector<JobPath> folders;
  // Only a job that saves writes its checkpoint folder (checkpoint.enable = false saves nothing, as in TorchTitan).
  const CheckpointSection& checkpoint = c.checkpoint;
  if ((checkpoint.enable && !checkpoint.load_only) || checkpoint.create_seed_checkpoint) {
    folders.push_back({"checkpoint.folder", dump / checkpoint.folder});
  }
  if (c.metrics.enable_tensorboard) folders.push_back({"metrics.save_tb_folder", dump / c.metrics.save_tb_folder});
  if (c.comm.trace_buf_size > 0) folders.push_back({"comm.save_traces_folder", dump / c.comm.save_traces_folder});
  if (c.profiling.enable_profiling) {
    folders.push_back({"profiling.save_traces_folder", dump / c.profiling.save_traces_folder});
  }
  if (c.profiling.enable_memory_snapshot) {
    folders.push_back({"profiling.save_memory_snapshot_folder", dump / c.profiling.save_memory_snapshot_folder});
  }
  return folders;
}

// Everything the job reads from a path (a built-in tokenizer or template name is no path).
std::vector<JobPath> inputs(const JobConfig& c) {
  std::vector<JobPath> read{{"training.dataset_path", c.training.dataset_path},
                            {"model.hf_config", c.model.hf_config},
                            {"checkpoint.initial_load_path", c.checkpoint.initial_load_path}};
  std::error_code error;
  if (fs::exists(c.model.tokenizer_path, error)) read.push_back({"model.tokenizer_path", c.model.tokenizer_path});
  if (fs::exists(c.chat.template_name, error)) read.push_back({"chat.template", c.chat.template_name});
  return read;
}

fs::path metrics_path(const JobConfig& config) { return fs::path(config.job.dump_folder) / "metrics.jsonl"; }

}  // namespace

void check_outputs_apart_from_inputs(const JobConfig& config) {
  std::vector<JobPath> outputs = output_folders(config);
  outputs.push_back({"metrics file (job.dump_folder/metrics.jsonl)", metrics_path(config)});
  for (const JobPath& output : outputs) {
    for (const JobPath& input : inputs(config)) {
      check_output_apart_from_input(output.path, output.key, input.path, input.key);
    }
  }
}

void check_initial_load_path(const JobConfig& config) {
  const CheckpointSection& c = config.checkpoint;
  const std::string& path = c.initial_load_path;
  if (path.empty()) return;
  const bool hf = models::is_hf_model_folder(path);
  const bool exported = is_model_export_folder(path);
  std::error_code error;
  TITAN_CHECK(!config.torchtitan.initial_load_in_hf || hf || !fs::exists(path, error),
              "checkpoint.initial_load_in_hf = true, but checkpoint.initial_load_path '{}' is not a Hugging Face model "
              "folder (config.json and safetensors weights)",
              path);
  // A DCP folder's training state is TorchTitan's (dcp_training_state.h); whether it holds one is checked as it loads.
  TITAN_CHECK(c.initial_load_model_only || (!hf && !exported),
              "checkpoint.initial_load_model_only = false restores the training state of a titan checkpoint step "
              "folder or a PyTorch DCP folder, but checkpoint.initial_load_path '{}' is a {} (model weights only): "
              "set initial_load_model_only = true",
              path, hf ? "Hugging Face model folder" : "titan model export");
}

void prepare_output_paths(const JobConfig& config) {
  for (const JobPath& folder : output_folders(config)) {
    std::error_code error;
    const auto status = fs::status(folder.path, error);
    TITAN_CHECK(!fs::exists(status) || fs::is_directory(status),
                "{} '{}' is a file, not a folder: the job writes into it (choose another {}, or move the file)",
                folder.key, folder.path.string(), folder.key);
    fs::create_directories(folder.path, error);
    TITAN_CHECK(!error, "{} '{}' cannot be created: {}", folder.key, folder.path.string(), error.message());
  }
  // Opened for appending now, as the job will; a folder or an unwritable file in its place fails here.
  const fs::path metrics = metrics_path(config);
  const int fd = ::open(metrics.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  TITAN_CHECK(fd >= 0, "cannot open the metrics file '{}' (job.dump_folder/metrics.jsonl) for writing: {}",
              metrics.string(), std::strerror(errno));
  ::close(fd);
}

}  // namespace titan::train
