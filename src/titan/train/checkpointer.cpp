#include "titan/train/checkpointer.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/chunk_file.h"
#include "titan/checkpoint/safetensors_header.h"
#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/train/config_loader.h"

namespace titan::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kChecksumBlockBytes = uint64_t{1} << 20;

std::string rank_file(int rank, const char* extension) { return fmt::format("rank-{:05}.{}", rank, extension); }

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  TITAN_CHECK(file.good(), "cannot read '{}'", path.string());
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A collective that also serves as a barrier: the max over ranks of each flag.
std::vector<float> max_over_world(const comm::DeviceMesh& mesh, std::vector<float> flags) {
  Tensor t = Tensor::from_vector(flags, {static_cast<int64_t>(flags.size())});
  const auto& world = mesh.group(comm::MeshDim::world);
  if (world->size() > 1) world->all_reduce(t, comm::ReduceOp::max)->wait();
  return t.to_floats();
}

// Test hook: TITAN_TEST_DIE_DURING_CHECKPOINT_WRITE=<step> kills this process
// (SIGKILL: no handler, no cleanup) halfway through writing that step's data.
std::function<void()> die_midway_hook(int64_t step) {
  const char* at = std::getenv("TITAN_TEST_DIE_DURING_CHECKPOINT_WRITE");
  if (at == nullptr || std::stoll(at) != step) return {};
  return [] {
    std::fprintf(stderr, "titan: TITAN_TEST_DIE_DURING_CHECKPOINT_WRITE: killing the process mid-write\n");
    std::fflush(stderr);
    ::kill(::getpid(), SIGKILL);
  };
}

}  // namespace

Checkpointer::Checkpointer(const JobConfig& config, const comm::DeviceMesh& mesh) : config_(config), mesh_(mesh) {
  root_ = (fs::path(config_.job.dump_folder) / config_.checkpoint.folder).string();
  rank_ = mesh_.coordinate(comm::MeshDim::world);
  world_ = mesh_.size(comm::MeshDim::world);
}

Checkpointer::~Checkpointer() {
  if (writer_.joinable()) writer_.join();
}

void Checkpointer::write_rank_files(int64_t step, const std::vector<StateTensor>& tensors, const json& rank_state) {
  const fs::path staging = fs::path(root_) / checkpoint::staging_folder_name(step);
  std::vector<checkpoint::ChunkToWrite> chunks;
  json described = json::object();
  for (const StateTensor& t : tensors) {
    if (!t.write || t.tensor.numel() == 0) continue;
    chunks.push_back({t.name, t.tensor, t.global_shape, t.offsets});
    described[t.name] = {{"dtype", checkpoint::safetensors_dtype_name(t.tensor.dtype())}, {"shape", t.global_shape}};
  }
  const auto written = checkpoint::write_chunk_file((staging / rank_file(rank_, "safetensors")).string(), chunks,
                                                    kChecksumBlockBytes, die_midway_hook(step));
  for (const auto& [name, chunk] : written) {
    described[name]["chunk"] = {{"file", chunk.file},
                                {"byte_offset", chunk.byte_offset},
                                {"offsets", chunk.offsets},
                                {"shape", chunk.shape},
                                {"crc32c", chunk.checksums}};
  }
  // What this rank wrote, for rank 0 to merge; removed once merged.
  checkpoint::write_file_durably((staging / rank_file(rank_, "json")).string(),
                                 json{{"rank", rank_}, {"tensors", described}, {"rank_state", rank_state}}.dump());
}

double Checkpointer::save(int64_t step, const std::vector<StateTensor>& tensors, const json& state,
                          const json& rank_state, bool async) {
  const auto start = Clock::now();
  wait();
  const fs::path staging = fs::path(root_) / checkpoint::staging_folder_name(step);
  if (rank_ == 0) {
    fs::remove_all(staging);  // left by an interrupted save of this step
    fs::create_directories(staging);
  }
  max_over_world(mesh_, {0.0f});  // every rank sees the staging folder before writing into it
  pending_ = true;
  pending_step_ = step;
  pending_state_ = state;
  written_ = false;
  writer_error_ = nullptr;
  if (!async) {
    try {
      write_rank_files(step, tensors, rank_state);
    } catch (...) {
      discard_pending();
      throw;
    }
    written_ = true;
    wait();
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  // A host copy of what this rank writes; training changes the live tensors from the next step on.
  take_snapshot(tensors);
  writer_ = std::thread([this, step, rank_state] {
    try {
      write_rank_files(step, snapshot_, rank_state);
    } catch (...) {
      writer_error_ = std::current_exception();
    }
    written_ = true;
  });
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void Checkpointer::take_snapshot(const std::vector<StateTensor>& tensors) {
  autograd::NoGradGuard no_grad;
  std::vector<const StateTensor*> written;
  for (const StateTensor& t : tensors) {
    if (t.write && t.tensor.numel() > 0) written.push_back(&t);
  }
  const bool reusable =
      snapshot_.size() == written.size() &&
      std::equal(written.begin(), written.end(), snapshot_.begin(), [](const StateTensor* t, const StateTensor& copy) {
        return t->name == copy.name && t->tensor.shape() == copy.tensor.shape() &&
               t->tensor.dtype() == copy.tensor.dtype();
      });
  if (!reusable) {
    snapshot_.clear();
    for (const StateTensor* t : written) {
      snapshot_.push_back(*t);
      snapshot_.back().tensor = t->tensor.clone();
    }
    return;
  }
  for (size_t i = 0; i < written.size(); ++i) {
    StateTensor& copy = snapshot_[i];
    const Tensor buffer = copy.tensor;
    copy = *written[i];
    copy.tensor = buffer;
    titan::copy_(copy.tensor, written[i]->tensor);
  }
}

bool Checkpointer::end_of_step(bool stop_requested) {
  const bool writing = pending_ && !written_;
  const std::vector<float> flags = max_over_world(mesh_, {stop_requested ? 1.0f : 0.0f, writing ? 1.0f : 0.0f});
  if (pending_ && flags[1] == 0.0f) wait();  // every rank's write is done: no waiting, just publishing
  return flags[0] > 0.0f;
}

void Checkpointer::wait() {
  if (!pending_) return;
  if (writer_.joinable()) writer_.join();
  if (writer_error_) {
    discard_pending();
    std::rethrow_exception(writer_error_);
  }
  max_over_world(mesh_, {0.0f});  // every rank's files are written and fsynced
  if (rank_ == 0) {
    try {
      publish();
    } catch (...) {
      discard_pending();
      throw;
    }
  }
  pending_ = false;
}

// A save that failed (a full disk, say) leaves no staging folder behind: the
// job ends with the error, and the checkpoints before it are what a rerun resumes from.
void Checkpointer::discard_pending() {
  pending_ = false;
  std::error_code ignored;
  fs::remove_all(fs::path(root_) / checkpoint::staging_folder_name(pending_step_), ignored);
}

void Checkpointer::publish() {
  const auto start = Clock::now();
  const fs::path staging = fs::path(root_) / checkpoint::staging_folder_name(pending_step_);
  checkpoint::CheckpointMetadata metadata;
  metadata.step = pending_step_;
  metadata.titan_version = TITAN_VERSION;
  metadata.checksum_block_bytes = kChecksumBlockBytes;
  metadata.state = pending_state_;
  json loaders = json::object();
  uint64_t bytes = 0;
  for (int r = 0; r < world_; ++r) {
    const fs::path sidecar = staging / rank_file(r, "json");
    const json described = json::parse(read_text(sidecar));
    for (const auto& [name, value] : described["tensors"].items()) {
      checkpoint::TensorMetadata& tensor = metadata.tensors[name];
      tensor.dtype = checkpoint::parse_safetensors_dtype(value["dtype"].get<std::string>(), sidecar.string(), name);
      tensor.shape = value["shape"].get<std::vector<int64_t>>();
      if (!value.contains("chunk")) continue;
      const json& c = value["chunk"];
      checkpoint::ChunkMetadata chunk{c["file"].get<std::string>(), c["byte_offset"].get<uint64_t>(),
                                      c["offsets"].get<std::vector<int64_t>>(), c["shape"].get<std::vector<int64_t>>(),
                                      c["crc32c"].get<std::vector<uint32_t>>()};
      bytes += checkpoint::chunk_bytes(chunk, tensor.dtype);
      tensor.chunks.push_back(std::move(chunk));
    }
    const json& rank_state = described["rank_state"];
    if (rank_state.contains("dataloader"))
      loaders[std::to_string(rank_state["dp_rank"].get<int>())] = rank_state["dataloader"];
  }
  if (!loaders.empty()) metadata.state["dataloader"] = loaders;
  const std::string text = checkpoint::checkpoint_metadata_to_json(metadata);
  // The same checks a loader makes: every tensor covered exactly once by the ranks' chunks.
  checkpoint::parse_checkpoint_metadata(text, (staging / checkpoint::kMetadataFile).string());
  checkpoint::write_file_durably((staging / checkpoint::kMetadataFile).string(), text);
  JobConfig config = config_;
  checkpoint::write_file_durably((staging / "job.toml").string(), config_to_toml(config));
  for (int r = 0; r < world_; ++r) fs::remove(staging / rank_file(r, "json"));
  const std::string target = (fs::path(root_) / checkpoint::step_folder_name(pending_step_)).string();
  checkpoint::publish_checkpoint(staging.string(), target);
  checkpoint::remove_old_checkpoints(root_, config_.checkpoint.keep_latest_k);
  std::printf("titan: checkpoint of step %lld written to %s (%.3f GB, published in %.3f s)\n",
              static_cast<long long>(pending_step_), target.c_str(), static_cast<double>(bytes) / 1e9,
              std::chrono::duration<double>(Clock::now() - start).count());
  std::fflush(stdout);
}

Checkpointer::Loaded Checkpointer::load(const std::string& folder, const std::vector<StateTensor>& tensors,
                                        const std::vector<std::string>& parts,
                                        const std::set<std::string>* model_names) {
  TITAN_CHECK(fs::is_directory(folder), "checkpoint '{}' does not exist", folder);
  TITAN_CHECK(checkpoint::is_complete_checkpoint(folder),
              "checkpoint '{}' is incomplete (no {} marker: its save was interrupted)", folder,
              checkpoint::kCompleteMarker);
  const fs::path metadata_path = fs::path(folder) / checkpoint::kMetadataFile;
  TITAN_CHECK(fs::is_regular_file(metadata_path), "checkpoint '{}': missing {}", folder, checkpoint::kMetadataFile);
  const checkpoint::CheckpointMetadata metadata =
      checkpoint::parse_checkpoint_metadata(read_text(metadata_path), metadata_path.string());
  // The step is in the folder's name, in metadata.json and in the train state:
  // a hand-edited one would silently replay or skip steps, so they must agree.
  fs::path named = fs::path(folder);
  if (!named.has_filename()) named = named.parent_path();
  if (const auto step = checkpoint::step_of_folder_name(named.filename().string())) {
    TITAN_CHECK(metadata.step == *step, "{}: \"step\" is {} but the folder is named for step {}",
                metadata_path.string(), metadata.step, *step);
    const json* train_state = metadata.state.contains("train_state") ? &metadata.state["train_state"] : nullptr;
    TITAN_CHECK(train_state == nullptr || !train_state->contains("step") || (*train_state)["step"] == *step,
                "{}: train_state.step is {} but the folder is named for step {}", metadata_path.string(),
                train_state != nullptr && train_state->contains("step") ? (*train_state)["step"].dump() : "", *step);
  }
  Loaded loaded;
  loaded.state = metadata.state;
  TITAN_CHECK(metadata.state.contains("contents") && metadata.state["contents"].is_array(),
              "{}: state has no \"contents\" list", metadata_path.string());
  loaded.contents = metadata.state["contents"].get<std::vector<std::string>>();
  auto wanted = [&](const std::string& part) {
    return std::find(parts.begin(), parts.end(), part) != parts.end() &&
           std::find(loaded.contents.begin(), loaded.contents.end(), part) != loaded.contents.end();
  };
  // A tensor the checkpoint has and the model lacks means a different model.
  std::set<std::string> known;
  if (model_names != nullptr) {
    known = *model_names;
  } else {
    for (const StateTensor& t : tensors) known.insert(t.name);
  }
  for (const auto& [name, tensor] : metadata.tensors) {
    const std::string part = name.substr(0, name.find('.'));
    TITAN_CHECK(!wanted(part) || known.count(name), "{}: tensor '{}' has no counterpart in this model", folder, name);
  }
  checkpoint::ChunkReader reader(folder, metadata);
  autograd::NoGradGuard no_grad;
  for (const StateTensor& t : tensors) {
    if (wanted(t.part)) reader.read_box(t.name, t.tensor, t.global_shape, t.offsets);
  }
  loaded.bytes_read = reader.bytes_read();
  return loaded;
}

}  // namespace titan::train
