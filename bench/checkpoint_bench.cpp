#include "bench/checkpoint_bench.h"
#include "bench/timing.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/json_report.h"
#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/comm/world.h"
#include "titan/core/error.h"
#include "titan/core/generator.h"
#include "titan/models/model_spec.h"
#include "titan/train/checkpointer.h"

namespace titan::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Drops a file's pages from the page cache, so the next read comes from the disk.
void evict(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void evict_folder(const fs::path& folder) {
  for (const auto& entry : fs::directory_iterator(folder)) evict(entry.path());
}

// What `dd bs=64M conv=fsync` does: the disk's write speed for this many bytes.
double raw_write_seconds(const fs::path& path, const std::vector<char>& buffer, uint64_t bytes) {
  const auto start = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TITAN_CHECK(fd >= 0, "cannot create {}", path.string());
  for (uint64_t done = 0; done < bytes;) {
    const auto n = ::write(fd, buffer.data(), std::min<uint64_t>(buffer.size(), bytes - done));
    TITAN_CHECK(n > 0, "write to {} failed", path.string());
    done += static_cast<uint64_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  return since(start);
}

double raw_read_seconds(const fs::path& path, std::vector<char>& buffer) {
  evict(path);
  const auto start = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY);
  while (::read(fd, buffer.data(), buffer.size()) > 0) {
  }
  ::close(fd);
  return since(start);
}

}  // namespace

int run_checkpoint_bench(const CheckpointBenchOptions& options) {
  // A 32k vocabulary (Llama 2's) instead of 128k keeps the state near 2 GB at 2 layers.
  models::DecoderConfig config = models::model_config("llama3", "1B", 32000);
  config.layers.resize(static_cast<size_t>(options.layers));
  auto model = config.build(Device::cpu());
  Generator generator(1);
  model->init_weights(generator);
  std::vector<train::StateTensor> tensors;
  uint64_t bytes = 0;
  for (auto& [name, parameter] : model->named_parameters()) {
    const std::vector<int64_t> shape = parameter->data.shape();
    tensors.push_back({"model." + name, "model", parameter->data, shape, std::vector<int64_t>(shape.size(), 0), true});
    for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
      // Moments with the parameter's values: incompressible, like real ones.
      tensors.push_back({fmt::format("optimizer.{}.{}", moment, name), "optimizer", parameter->data.clone(), shape,
                         std::vector<int64_t>(shape.size(), 0), true});
    }
    bytes += 3 * parameter->data.nbytes();
  }
  const double gb = static_cast<double>(bytes) / 1e9;
  std::printf(
      "checkpoint bench: llama3 1B shapes, vocab 32000, %lld layers: %.2f GB of weights + AdamW moments (f32) in %s, "
      "median of %d\n",
      static_cast<long long>(options.layers), gb, options.folder.c_str(), options.repeats);

  fs::remove_all(options.folder);
  fs::create_directories(options.folder);
  std::vector<char> buffer(64u << 20, 1);
  const fs::path raw = fs::path(options.folder) / "raw.bin";

  train::JobConfig job;
  job.job.dump_folder = options.folder;
  job.checkpoint.keep_latest_k = 1;
  comm::World& world = comm::World::instance();
  comm::DeviceMesh mesh(comm::ParallelDims{1, 1, 1, 1, 1}, world.group());
  train::Checkpointer checkpointer(job, mesh);
  const nlohmann::json state{{"contents", {"model", "optimizer"}}};

  // Raw disk and checkpoint alternate, so both see the disk in the same state
  // (a virtual disk's first writes to fresh blocks are much slower than later ones).
  std::vector<double> raw_writes, raw_reads, blocking_saves, loads, stalls, async_totals;
  int64_t step = 0;
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    raw_writes.push_back(raw_write_seconds(raw, buffer, bytes));
    raw_reads.push_back(raw_read_seconds(raw, buffer));
    fs::remove(raw);

    auto start = Clock::now();
    checkpointer.save(++step, tensors, state, nlohmann::json::object(), /*async=*/false);
    blocking_saves.push_back(since(start));

    const fs::path folder = fs::path(checkpointer.root()) / checkpoint::step_folder_name(step);
    evict_folder(folder);
    start = Clock::now();
    train::Checkpointer::load(folder.string(), tensors, {"model", "optimizer"});
    loads.push_back(since(start));

    // An async save as a training loop makes them, one per interval: the
    // first takes the host copy's memory, later ones reuse it.
    start = Clock::now();
    stalls.push_back(checkpointer.save(++step, tensors, state, nlohmann::json::object(), /*async=*/true));
    checkpointer.wait();
    async_totals.push_back(since(start));
  }
  fs::remove_all(options.folder);
  const double raw_write = median(raw_writes), raw_read = median(raw_reads), blocking = median(blocking_saves),
               load = median(loads), async_total = median(async_totals);
  const double first_stall = stalls.front();
  const double stall = median(std::vector<double>(stalls.begin() + (stalls.size() > 1 ? 1 : 0), stalls.end()));

  std::printf("%-34s %10s %10s\n", "", "seconds", "GB/s");
  std::printf("%-34s %10.2f %10.2f\n", "raw write + fsync (dd-like)", raw_write, gb / raw_write);
  std::printf("%-34s %10.2f %10.2f   %.0f%% of raw write\n", "checkpoint save (blocking)", blocking, gb / blocking,
              100.0 * raw_write / blocking);
  std::printf("%-34s %10.2f %10.2f\n", "raw read (page cache dropped)", raw_read, gb / raw_read);
  std::printf("%-34s %10.2f %10.2f   %.0f%% of raw read\n", "checkpoint load", load, gb / load,
              100.0 * raw_read / load);
  std::printf("%-34s %10.2f %10s   %.1f%% of the blocking save\n", "async save: first step stall", first_stall, "",
              100.0 * first_stall / blocking);
  std::printf("%-34s %10.2f %10s   %.1f%% of the blocking save\n", "async save: later step stalls", stall, "",
              100.0 * stall / blocking);
  std::printf("%-34s %10.2f %10.2f\n", "async save: until published", async_total, gb / async_total);
  write_json_report(options.json_path, {{"gigabytes", gb},
                                        {"raw_write_seconds", raw_write},
                                        {"raw_read_seconds", raw_read},
                                        {"blocking_save_seconds", blocking},
                                        {"load_seconds", load},
                                        {"async_first_stall_seconds", first_stall},
                                        {"async_stall_seconds", stall},
                                        {"async_total_seconds", async_total}});
  return 0;
}

}  // namespace titan::bench
