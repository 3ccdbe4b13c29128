#include "bench/startup_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/json_report.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/comm/device_mesh.h"
#include "titan/comm/fake_process_group.h"
#include "titan/core/allocator.h"
#include "titan/core/units.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/model_spec.h"
#include "titan/train/job_model.h"
#include "titan/train/model_export.h"

namespace titan::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct StartupResult {
  double seconds = 0.0;      // median, to a built and initialised model
  double peak_bytes = 0.0;   // most bytes live in tensors while building (the same every repeat)
  double shard_bytes = 0.0;  // the rank's parameters once built
  double read_bytes = 0.0;   // tensor bytes read from the weights' files (one repeat)
};

train::JobConfig job_config(const std::string& flavor, int64_t fsdp, int64_t tp) {
  train::JobConfig config;
  config.model.name = "llama3";
  config.model.flavor = flavor;
  config.model.vocab_size = models::model_spec("llama3").config(flavor, 0).vocab_size;
  config.training.seq_len = 2048;
  config.training.memory_check = false;
  config.parallelism.data_parallel_shard_degree = fsdp;
  config.parallelism.tensor_parallel_degree = tp;
  config.comm.mode = "fake_backend";
  config.comm.fake_world_size = fsdp * tp;
  return config;
}

// Rank 0 of the job, `repeats` times; the model is dropped between repeats.
StartupResult start_rank(const train::JobConfig& base, train::ModelStart start, int repeats) {
  StartupResult result;
  std::vector<double> seconds;
  Allocator& host = allocator_for(DeviceType::cpu);
  for (int i = 0; i < repeats; ++i) {
    train::JobConfig config = base;
    const comm::ParallelDims dims{
        1, 1, config.parallelism.data_parallel_shard_degree, 1, config.parallelism.tensor_parallel_degree, 1};
    const comm::DeviceMesh mesh(dims, std::make_shared<comm::FakeProcessGroup>(0, config.comm.fake_world_size));
    const double live_before = static_cast<double>(host.stats().live_bytes);
    host.reset_peak();
    const uint64_t read_before = checkpoint::safetensors_bytes_read();
    const auto begin = Clock::now();
    Generator generator;
    train::JobModel job = train::build_job_model(config, mesh, Device::cpu(), 0, generator, start);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - begin).count());
    result.peak_bytes = static_cast<double>(host.stats().peak_bytes) - live_before;
    result.read_bytes = static_cast<double>(checkpoint::safetensors_bytes_read() - read_before);
    result.shard_bytes = 0.0;
    for (auto& [name, parameter] : job.model->named_parameters()) {
      result.shard_bytes += static_cast<double>(parameter->data.nbytes());
    }
  }
  std::sort(seconds.begin(), seconds.end());
  result.seconds = seconds[seconds.size() / 2];
  return result;
}

nlohmann::json to_json(const StartupResult& r) {
  return {{"seconds", r.seconds},
          {"peak_gib", r.peak_bytes / kBytesPerGiB},
          {"shard_gib", r.shard_bytes / kBytesPerGiB},
          {"read_gib", r.read_bytes / kBytesPerGiB}};
}

void print_row(const char* what, const StartupResult& r) {
  std::printf("  %-34s %8.2f s   peak %8.3f GiB   its shards %8.3f GiB   read %8.3f GiB\n", what, r.seconds,
              r.peak_bytes / kBytesPerGiB, r.shard_bytes / kBytesPerGiB, r.read_bytes / kBytesPerGiB);
}

}  // namespace

int run_startup_bench(const StartupBenchOptions& options) {
  std::printf("titan bench startup: llama3 %s, rank 0 of FSDP %lld (played by a fake process group), median of %d\n",
              options.flavor.c_str(), static_cast<long long>(options.fsdp), options.repeats);
  train::JobConfig config = job_config(options.flavor, options.fsdp, 1);
  if (!options.weights.empty()) {
    TITAN_CHECK(models::is_hf_model_folder(options.weights) || train::is_model_export_folder(options.weights),
                "--startup-weights {}: not a Hugging Face model folder or a titan model export", options.weights);
    std::printf("  weights read from %s\n", options.weights.c_str());
    config.checkpoint.initial_load_path = options.weights;
  }
  const StartupResult meta = start_rank(config, train::ModelStart::meta_then_shards, options.repeats);
  const StartupResult whole = start_rank(config, train::ModelStart::whole_then_shards, options.repeats);
  print_row("meta, then only its shards", meta);
  print_row("whole f32 model, then cut (before)", whole);
  std::printf("  the meta path: %.2fx faster, %.2fx the peak memory\n", whole.seconds / meta.seconds,
              meta.peak_bytes / whole.peak_bytes);
  nlohmann::json report{{"flavor", options.flavor},
                        {"fsdp", options.fsdp},
                        {"weights", options.weights},
                        {"meta_then_shards", to_json(meta)},
                        {"whole_then_shards", to_json(whole)}};
  if (!options.large_flavor.empty()) {
    std::printf("titan bench startup: llama3 %s, rank 0 of FSDP %lld x TP %lld (the meta path only), once\n",
                options.large_flavor.c_str(), static_cast<long long>(options.large_fsdp),
                static_cast<long long>(options.large_tp));
    const StartupResult large = start_rank(job_config(options.large_flavor, options.large_fsdp, options.large_tp),
                                           train::ModelStart::meta_then_shards, 1);
    print_row("meta, then only its shards", large);
    report["large"] = {{"flavor", options.large_flavor},
                       {"fsdp", options.large_fsdp},
                       {"tp", options.large_tp},
                       {"meta_then_shards", to_json(large)}};
  }
  write_json_report(options.json_path, report);
  return 0;
}

}  // namespace titan::bench
