#include "titan/train/fast_tier.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/crc32c.h"
#include "titan/comm/world.h"
#include "titan/core/error.h"
#include "titan/core/units.h"

namespace titan::train {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int64_t kFastTierChunkBytes = int64_t{1} << 30;  // under MPI's int count
constexpr size_t kFastTierMaxSteps = 16;                   // steps each rank reports at a restart
constexpr int kFastTierTag = 7100;
const char* const kFastTierMarker = "fast_tier.json";  // in the dump folder: the tier belongs to this job

// POSIX reads into memory allocated once: a stream growing a string as it
// reads page-faults its way through every reallocation, which made restoring
// 50 MB take seconds.
void fast_tier_read_into(const fs::path& path, char* out, size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  TITAN_CHECK(fd >= 0, "fast tier: cannot read '{}': {}", path.string(), std::strerror(errno));
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail("fast tier: '{}' is shorter than {} bytes", path.string(), size);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

size_t fast_tier_file_size(const fs::path& path) {
  std::error_code error;
  const auto size = fs::file_size(path, error);
  TITAN_CHECK(!error, "fast tier: cannot read '{}': {}", path.string(), error.message());
  return static_cast<size_t>(size);
}

std::string fast_tier_read(const fs::path& path) {
  std::string text(fast_tier_file_size(path), '\0');
  fast_tier_read_into(path, text.data(), text.size());
  return text;
}

// A whole file as a byte tensor (what MPI sends and the restore copies from).
Tensor fast_tier_read_tensor(const fs::path& path) {
  const size_t size = fast_tier_file_size(path);
  Tensor bytes = Tensor::empty({static_cast<int64_t>(size)}, DType::u8);
  if (size > 0) fast_tier_read_into(path, static_cast<char*>(bytes.data_ptr()), size);
  return bytes;
}

void fast_tier_write(const fs::path& path, const void* data, size_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TITAN_CHECK(fd >= 0, "fast tier: cannot create '{}': {}", path.string(), std::strerror(errno));
  const char* p = static_cast<const char*>(data);
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      fail("fast tier: writing '{}' failed: {} (checkpoint.local_folder full?)", path.string(), std::strerror(error));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
}

// Same local rank on the node `shift` nodes on (ring); -1 when that node has no such rank.
int fast_tier_peer(const std::vector<int>& node_of_rank, int rank, int nodes, int shift) {
  int local = 0;
  for (int r = 0; r < rank; ++r) local += node_of_rank[r] == node_of_rank[rank] ? 1 : 0;
  const int node = (node_of_rank[rank] + shift + nodes) % nodes;
  int seen = 0;
  for (int r = 0; r < static_cast<int>(node_of_rank.size()); ++r) {
    if (node_of_rank[r] != node) continue;
    if (seen++ == local) return r;
  }
  return -1;
}

void fast_tier_wait_all(const std::vector<std::shared_ptr<comm::Work>>& works) {
  for (const auto& work : works) work->wait();
}

// Sends `blob` and `meta` to `peer` as requests appended to `works` (the tensors must outlive them).
void fast_tier_post_send(comm::ProcessGroup& group, const Tensor& sizes, const Tensor& blob, const Tensor& meta,
                         int peer, std::vector<std::shared_ptr<comm::Work>>& works) {
  works.push_back(group.send(sizes, peer, kFastTierTag));
  for (int64_t at = 0; at < blob.numel(); at += kFastTierChunkBytes) {
    works.push_back(
        group.send(blob.slice(0, at, std::min(blob.numel(), at + kFastTierChunkBytes)), peer, kFastTierTag + 1));
  }
  works.push_back(group.send(meta, peer, kFastTierTag + 2));
}

// Receives what fast_tier_post_send sent, after its sizes arrived.
void fast_tier_post_recv(comm::ProcessGroup& group, const Tensor& sizes, Tensor& blob, Tensor& meta, int peer,
                         std::vector<std::shared_ptr<comm::Work>>& works) {
  const int64_t* n = sizes.data<int64_t>();
  if (!blob.defined() || blob.numel() != n[0]) blob = Tensor::empty({n[0]}, DType::u8);
  meta = Tensor::empty({n[1]}, DType::u8);
  for (int64_t at = 0; at < blob.numel(); at += kFastTierChunkBytes) {
    works.push_back(
        group.recv(blob.slice(0, at, std::min(blob.numel(), at + kFastTierChunkBytes)), peer, kFastTierTag + 1));
  }
  works.push_back(group.recv(meta, peer, kFastTierTag + 2));
}

Tensor fast_tier_text_tensor(const std::string& text) {
  Tensor t = Tensor::empty({static_cast<int64_t>(text.size())}, DType::u8);
  if (!text.empty()) std::memcpy(t.data_ptr(), text.data(), text.size());
  return t;
}

std::string fast_tier_rank_dir(const char* prefix, int rank) { return fmt::format("{}{:05}", prefix, rank); }

std::string fast_tier_shape(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace

std::string fast_tier_root(const JobConfig& config) {
  if (!config.checkpoint.local_folder.empty()) return config.checkpoint.local_folder;
  // Unique per dump folder: two jobs on one node never share a fast tier.
  const std::string dump = fs::absolute(config.job.dump_folder).lexically_normal().string();
  return fmt::format("/dev/shm/titan-{:08x}", checkpoint::crc32c(dump.data(), dump.size()));
}

FastTier::FastTier(const JobConfig& config, const comm::DeviceMesh& mesh) : config_(config), mesh_(mesh) {
  const CheckpointSection& c = config_.checkpoint;
  interval_ = c.enable && !c.load_only ? c.local_interval : 0;
  // Restoring works even when this run saves no fast tier (local_interval 0 after a run that had one is not read).
  if (!c.enable || c.local_interval <= 0) return;
  rank_ = mesh_.coordinate(comm::MeshDim::world);
  world_ = mesh_.size(comm::MeshDim::world);
  root_ = fast_tier_root(config_);
  const comm::World& world = comm::World::instance();
  std::vector<int> node_of_rank = world.node_of_rank();
  int nodes = world.nodes();
  if (static_cast<int>(node_of_rank.size()) != world_) {  // not launched: one node
    node_of_rank.assign(static_cast<size_t>(world_), 0);
    nodes = 1;
  }
  node_name_ = static_cast<int>(world.node_of_rank().size()) == world_ ? world.node_name() : comm::this_node_name();
  if (c.local_replica && nodes > 1) {
    partner_ = fast_tier_peer(node_of_rank, rank_, nodes, 1);
    ward_ = fast_tier_peer(node_of_rank, rank_, nodes, -1);
    if (partner_ < 0 || ward_ < 0) {
      std::printf("titan: rank %d: the neighbouring node has no rank of the same local rank: no fast-tier replica\n",
                  rank_);
      partner_ = ward_ = -1;
    }
  } else if (c.local_replica && rank_ == 0) {
    std::printf(
        "titan: checkpoint.local_replica: the job runs on one node, so the fast tier has no replica on "
        "another node\n");
  }
  fs::create_directories(own_folder());
}

FastTier::~FastTier() {
  if (writer_.joinable()) writer_.join();
}

std::string FastTier::own_folder() const {
  return (fs::path(root_) / node_name_ / fast_tier_rank_dir("rank-", rank_)).string();
}

std::string FastTier::replica_folder(int ward_rank) const {
  return (fs::path(root_) / node_name_ / fast_tier_rank_dir("replica-of-rank-", ward_rank)).string();
}

void FastTier::write_step(const std::string& folder, int64_t step, const Tensor& blob, const std::string& meta) const {
  const fs::path staging = fs::path(folder) / checkpoint::staging_folder_name(step);
  const fs::path target = fs::path(folder) / checkpoint::step_folder_name(step);
  fs::remove_all(staging);
  fs::create_directories(staging);
  const size_t bytes = blob.defined() ? blob.nbytes() : 0;
  fast_tier_write(staging / "tensors.bin", bytes > 0 ? blob.data_ptr() : nullptr, bytes);
  fast_tier_write(staging / "state.json", meta.data(), meta.size());
  const json sums{{"tensors.bin", bytes > 0 ? checkpoint::crc32c(blob.data_ptr(), bytes) : 0u},
                  {"state.json", checkpoint::crc32c(meta.data(), meta.size())}};
  const std::string text = sums.dump();
  fast_tier_write(staging / "CHECKSUMS", text.data(), text.size());
  // A step written again (after a restart from an older step) replaces the old copy.
  fs::remove_all(target);
  fs::rename(staging, target);
  // Keep the newest local_keep_latest_k.
  std::vector<int64_t> steps;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (const auto s = checkpoint::step_of_folder_name(entry.path().filename().string())) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  const size_t keep = static_cast<size_t>(std::max<int64_t>(1, config_.checkpoint.local_keep_latest_k));
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    std::error_code ignored;
    fs::remove_all(fs::path(folder) / checkpoint::step_folder_name(steps[i]), ignored);
  }
}

FastTier::Cost FastTier::save(int64_t step, const std::vector<StateTensor>& tensors, const json& state,
                              const json& rank_state) {
  Cost cost;
  const auto start = SteadyClock::now();
  wait();
  if (rank_ == 0) {
    const fs::path marker = fs::path(config_.job.dump_folder) / kFastTierMarker;
    if (!fs::exists(marker)) checkpoint::write_file_durably(marker.string(), json{{"local_folder", root_}}.dump());
  }
  // The snapshot: every box this rank holds, packed into one host buffer kept between saves.
  autograd::NoGradGuard no_grad;
  int64_t total = 0;
  json described = json::array();
  for (const StateTensor& t : tensors) {
    total += static_cast<int64_t>(t.tensor.nbytes());
    described.push_back({{"name", t.name},
                         {"dtype", dtype_name(t.tensor.dtype())},
                         {"shape", t.tensor.shape()},
                         {"global_shape", t.global_shape},
                         {"offsets", t.offsets},
                         {"bytes", t.tensor.nbytes()}});
  }
  if (!own_blob_.defined() || own_blob_.numel() != total) own_blob_ = Tensor::empty({total}, DType::u8);
  char* out = static_cast<char*>(total > 0 ? own_blob_.data_ptr() : nullptr);
  for (const StateTensor& t : tensors) {
    TITAN_CHECK(t.tensor.is_contiguous() && t.tensor.device().is_cpu(),
                "fast tier: tensor '{}' is not a contiguous host tensor", t.name);
    if (t.tensor.nbytes() > 0) std::memcpy(out, t.tensor.data_ptr(), t.tensor.nbytes());
    out += t.tensor.nbytes();
  }
  const std::string meta =
      json{{"rank", rank_}, {"step", step}, {"tensors", described}, {"state", state}, {"rank_state", rank_state}}
          .dump();
  cost.fast_seconds = seconds_since(start);
  std::string ward_meta;
  if (partner_ >= 0) {
    const auto transfer = SteadyClock::now();
    comm::ProcessGroup& group = *mesh_.group(comm::MeshDim::world);
    const Tensor meta_tensor = fast_tier_text_tensor(meta);
    Tensor sizes = Tensor::from_vector<int64_t>({total, static_cast<int64_t>(meta.size())}, {2});
    Tensor ward_sizes = Tensor::empty({2}, DType::i64);
    std::vector<std::shared_ptr<comm::Work>> works;
    works.push_back(group.recv(ward_sizes, ward_, kFastTierTag));
    fast_tier_post_send(group, sizes, own_blob_, meta_tensor, partner_, works);
    works.front()->wait();
    Tensor ward_meta_tensor;
    fast_tier_post_recv(group, ward_sizes, ward_blob_, ward_meta_tensor, ward_, works);
    fast_tier_wait_all(works);
    ward_meta.assign(static_cast<const char*>(ward_meta_tensor.numel() > 0 ? ward_meta_tensor.data_ptr() : ""),
                     static_cast<size_t>(ward_meta_tensor.numel()));
    cost.replica_seconds = seconds_since(transfer);
  }
  const auto launch = SteadyClock::now();
  writer_error_ = nullptr;
  writer_ = std::thread([this, step, meta, ward_meta] {
    try {
      write_step(own_folder(), step, own_blob_, meta);
      if (partner_ >= 0) write_step(replica_folder(ward_), step, ward_blob_, ward_meta);
    } catch (...) {
      writer_error_ = std::current_exception();
    }
  });
  cost.fast_seconds += seconds_since(launch);
  return cost;
}

void FastTier::wait() {
  if (writer_.joinable()) writer_.join();
  if (writer_error_) {
    const std::exception_ptr error = writer_error_;
    writer_error_ = nullptr;
    std::rethrow_exception(error);
  }
}

std::set<int64_t> FastTier::complete_steps(const std::string& folder) const {
  std::set<int64_t> steps;
  std::error_code error;
  if (!fs::is_directory(folder, error)) return steps;
  for (const auto& entry : fs::directory_iterator(folder)) {
    // A .partial folder is a write the failure interrupted.
    if (const auto step = checkpoint::step_of_folder_name(entry.path().filename().string())) steps.insert(*step);
  }
  return steps;
}

bool FastTier::load_verified(const std::string& step_folder, Tensor& blob, Tensor& meta) const {
  const fs::path folder(step_folder);
  try {
    const json sums = json::parse(fast_tier_read(folder / "CHECKSUMS"));
    blob = fast_tier_read_tensor(folder / "tensors.bin");
    meta = fast_tier_read_tensor(folder / "state.json");
    for (const auto& [file, bytes] :
         {std::pair<const char*, const Tensor*>{"tensors.bin", &blob}, {"state.json", &meta}}) {
      const uint32_t crc = bytes->numel() > 0 ? checkpoint::crc32c(bytes->data_ptr(), bytes->nbytes()) : 0u;
      if (crc != sums.at(file).get<uint32_t>()) {
        std::printf(
            "titan: warning: fast tier: %s does not match its CRC32C (corrupt): this copy of %s is "
            "skipped\n",
            (folder / file).c_str(), folder.filename().c_str());
        std::fflush(stdout);
        blob = meta = Tensor();
        return false;
      }
    }
  } catch (const std::exception& e) {
    std::printf("titan: warning: fast tier: %s is unreadable (%s): skipped\n", folder.c_str(), e.what());
    std::fflush(stdout);
    blob = meta = Tensor();
    return false;
  }
  return true;
}

RestartChoice FastTier::choose(int64_t persistent_step) {
  std::vector<std::set<int64_t>> own(static_cast<size_t>(world_)), replica(static_cast<size_t>(world_));
  if (root_.empty()) return choose_restart(own, replica, persistent_step);
  // A fast tier a job of an earlier dump folder left at the same path is not this job's.
  const bool ours = fs::exists(fs::path(config_.job.dump_folder) / kFastTierMarker);
  std::set<int64_t> mine = ours ? complete_steps(own_folder()) : std::set<int64_t>{};
  std::set<int64_t> kept = ours && ward_ >= 0 ? complete_steps(replica_folder(ward_)) : std::set<int64_t>{};
  comm::ProcessGroup& group = *mesh_.group(comm::MeshDim::world);
  // Each round agrees on the newest step every rank can restore, then reads
  // (and checks) only the copies that step needs: a corrupt one is dropped
  // and the ranks agree again, without it.
  while (true) {
    // Rows 0..W-1: each rank's own steps; rows W..2W-1: the replica steps held for rank r.
    const int64_t k = static_cast<int64_t>(kFastTierMaxSteps);
    std::vector<int64_t> table(static_cast<size_t>(2 * world_ * k), -1);
    auto fill = [&](int row, const std::set<int64_t>& steps) {
      int64_t i = 0;
      for (auto it = steps.rbegin(); it != steps.rend() && i < k; ++it) table[static_cast<size_t>(row * k + i++)] = *it;
    };
    fill(rank_, mine);
    if (ward_ >= 0) fill(world_ + ward_, kept);
    Tensor t = Tensor::from_vector(table, {static_cast<int64_t>(table.size())});
    if (world_ > 1) group.all_reduce(t, comm::ReduceOp::max)->wait();
    const int64_t* all = t.data<int64_t>();
    for (int r = 0; r < world_; ++r) {
      own[static_cast<size_t>(r)].clear();
      replica[static_cast<size_t>(r)].clear();
      for (int64_t i = 0; i < k; ++i) {
        if (all[r * k + i] >= 0) own[static_cast<size_t>(r)].insert(all[r * k + i]);
        if (all[(world_ + r) * k + i] >= 0) replica[static_cast<size_t>(r)].insert(all[(world_ + r) * k + i]);
      }
    }
    RestartChoice choice = choose_restart(own, replica, persistent_step);
    if (choice.tier != RestoreSource::own && choice.tier != RestoreSource::replica) return choice;
    const std::string step_name = checkpoint::step_folder_name(choice.step);
    std::vector<int64_t> bad(static_cast<size_t>(2 * world_), 0);
    if (choice.per_rank[static_cast<size_t>(rank_)] == RestoreSource::own &&
        !load_verified((fs::path(own_folder()) / step_name).string(), loaded_blob_, loaded_meta_))
      bad[static_cast<size_t>(rank_)] = 1;
    if (ward_ >= 0 && choice.per_rank[static_cast<size_t>(ward_)] == RestoreSource::replica &&
        !load_verified((fs::path(replica_folder(ward_)) / step_name).string(), ward_loaded_blob_, ward_loaded_meta_))
      bad[static_cast<size_t>(world_ + ward_)] = 1;
    Tensor flags = Tensor::from_vector(bad, {static_cast<int64_t>(bad.size())});
    if (world_ > 1) group.all_reduce(flags, comm::ReduceOp::max)->wait();
    const int64_t* failed = flags.data<int64_t>();
    if (std::none_of(failed, failed + flags.numel(), [](int64_t f) { return f != 0; })) return choice;
    if (failed[rank_] != 0) mine.erase(choice.step);
    if (ward_ >= 0 && failed[world_ + ward_] != 0) kept.erase(choice.step);
    // The next round may pick another step: what was read for this one goes.
    loaded_blob_ = loaded_meta_ = ward_loaded_blob_ = ward_loaded_meta_ = Tensor();
  }
}

FastTier::Restored FastTier::restore(const RestartChoice& choice, const std::vector<StateTensor>& tensors) {
  const fs::path step_name = checkpoint::step_folder_name(choice.step);
  comm::ProcessGroup& group = *mesh_.group(comm::MeshDim::world);
  Restored restored;
  Tensor blob, meta_tensor;
  std::vector<std::shared_ptr<comm::Work>> works;
  // Serve the ward first (its replica is in this node's folder), then take what is mine.
  Tensor ward_blob, ward_meta, ward_sizes;
  if (ward_ >= 0 && choice.per_rank[static_cast<size_t>(ward_)] == RestoreSource::replica) {
    // Read and checked by choose().
    ward_blob = std::move(ward_loaded_blob_);
    ward_meta = std::move(ward_loaded_meta_);
    ward_sizes = Tensor::from_vector<int64_t>({ward_blob.numel(), ward_meta.numel()}, {2});
    fast_tier_post_send(group, ward_sizes, ward_blob, ward_meta, ward_, works);
  }
  if (choice.per_rank[static_cast<size_t>(rank_)] == RestoreSource::replica) {
    TITAN_CHECK(partner_ >= 0, "fast tier: rank {} has no partner to restore its replica from", rank_);
    Tensor sizes = Tensor::empty({2}, DType::i64);
    group.recv(sizes, partner_, kFastTierTag)->wait();
    std::vector<std::shared_ptr<comm::Work>> mine;
    fast_tier_post_recv(group, sizes, blob, meta_tensor, partner_, mine);
    fast_tier_wait_all(mine);
    restored.folder = fmt::format("the replica rank {} keeps ({}/{}/{} on its node)", partner_,
                                  fast_tier_rank_dir("replica-of-rank-", rank_), step_name.string(), "state.json");
  } else {
    blob = std::move(loaded_blob_);  // read and checked by choose()
    meta_tensor = std::move(loaded_meta_);
    restored.folder = (fs::path(own_folder()) / step_name).string();
  }
  fast_tier_wait_all(works);
  const json meta = json::parse(
      std::string(static_cast<const char*>(meta_tensor.data_ptr()), static_cast<size_t>(meta_tensor.numel())));
  const json& described = meta.at("tensors");
  const std::string& where = restored.folder;
  TITAN_CHECK(meta.at("rank").get<int>() == rank_, "fast tier {}: holds rank {}'s state, not rank {}'s", where,
              meta.at("rank").get<int>(), rank_);
  TITAN_CHECK(described.size() == tensors.size(),
              "fast tier {}: holds {} tensors but this rank has {}: the job's model or mesh layout changed (restore "
              "needs the same layout; delete checkpoint.local_folder to resume from the persistent checkpoint)",
              where, described.size(), tensors.size());
  const char* in = static_cast<const char*>(blob.numel() > 0 ? blob.data_ptr() : nullptr);
  int64_t used = 0;
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const StateTensor& t = tensors[i];
    const json& d = described[i];
    const auto shape = d.at("shape").get<std::vector<int64_t>>();
    const auto global = d.at("global_shape").get<std::vector<int64_t>>();
    const auto offsets = d.at("offsets").get<std::vector<int64_t>>();
    TITAN_CHECK(d.at("name") == t.name && d.at("dtype") == dtype_name(t.tensor.dtype()) && shape == t.tensor.shape() &&
                    global == t.global_shape && offsets == t.offsets,
                "fast tier {}: tensor {} is {} {} at offsets {} of {}, but this job's {} is {} {} at offsets {} of {}: "
                "the mesh layout differs (restore needs the same one; delete checkpoint.local_folder to resume from "
                "the persistent checkpoint)",
                where, d.at("name").get<std::string>(), d.at("dtype").get<std::string>(), fast_tier_shape(shape),
                fast_tier_shape(offsets), fast_tier_shape(global), t.name, dtype_name(t.tensor.dtype()),
                fast_tier_shape(t.tensor.shape()), fast_tier_shape(t.offsets), fast_tier_shape(t.global_shape));
    TITAN_CHECK(used + static_cast<int64_t>(t.tensor.nbytes()) <= blob.numel(), "fast tier {}: tensors.bin is short",
                where);
    if (t.tensor.nbytes() > 0) std::memcpy(t.tensor.data_ptr(), in + used, t.tensor.nbytes());
    used += static_cast<int64_t>(t.tensor.nbytes());
  }
  restored.state = meta.at("state");
  const json& rank_state = meta.at("rank_state");
  if (rank_state.contains("dataloader")) {
    // Every dp rank's cursor is the same (data_loader.h); each rank restores its own.
    restored.state["dataloader"] = {{std::to_string(rank_state.at("dp_rank").get<int>()), rank_state.at("dataloader")}};
  }
  // Which ranks took a replica, for rank 0's line.
  std::vector<int> from_replica;
  for (int r = 0; r < world_; ++r) {
    if (choice.per_rank[static_cast<size_t>(r)] == RestoreSource::replica) from_replica.push_back(r);
  }
  if (from_replica.empty()) {
    restored.description = "the fast tier";
  } else {
    // The holders are the partners: the same local ranks on the next node.
    const comm::World& world = comm::World::instance();
    std::vector<int> holders;
    holders.reserve(from_replica.size());
    for (int r : from_replica) holders.push_back(fast_tier_peer(world.node_of_rank(), r, world.nodes(), 1));
    restored.description = fmt::format(
        "the peer replica for rank(s) {} (the copies kept by rank(s) {} on the next node) and the fast tier for the "
        "rest",
        fmt::join(from_replica, ","), fmt::join(holders, ","));
  }
  return restored;
}

void FastTier::forget_after(int64_t step) const {
  if (root_.empty()) return;
  for (const std::string& folder : {own_folder(), ward_ >= 0 ? replica_folder(ward_) : std::string()}) {
    std::error_code error;
    if (folder.empty() || !fs::is_directory(folder, error)) continue;
    for (const auto& entry : fs::directory_iterator(folder)) {
      const std::string name = entry.path().filename().string();
      const auto saved = checkpoint::step_of_folder_name(name);
      // Interrupted writes (.partial) go too.
      if ((saved && *saved > step) || name.ends_with(".partial")) fs::remove_all(entry.path(), error);
    }
  }
}

void kill_if_asked(int64_t step, FastTier& tier) {
  const char* at = std::getenv("TITAN_TEST_SIGKILL_AFTER_STEP");
  if (at == nullptr || std::stoll(at) != step) return;
  tier.wait();
  std::fprintf(stderr, "titan: TITAN_TEST_SIGKILL_AFTER_STEP: killing the process after step %lld\n",
               static_cast<long long>(step));
  std::fflush(stderr);
  std::fflush(stdout);
  ::kill(::getpid(), SIGKILL);
}

}  // namespace titan::train
