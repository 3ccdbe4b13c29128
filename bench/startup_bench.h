// `titan bench startup`: what it takes a rank to hold its initialised shards
// of a model, built on the meta device and cut before any storage exists,
// against the path every job took before: the whole f32 model built and drawn
// on every rank, then cut. With weights to load (an HF folder or a titan
// export, as checkpoint.initial_load_path), the new path reads only the
// rank's shards and the old one the whole set. Each rank of the job is played
// in this process (comm::FakeProcessGroup), so the numbers are one rank's:
// seconds to a built, initialised (and loaded) model, the most bytes live in
// tensors meanwhile, and the tensor bytes read from the weights' files. Optionally also one rank of a job too
// large for the old path to start at all (e.g. Llama 3 405B on 1,024 ranks),
// for which only the new path is run.
#pragma once

#include <cstdint>
#include <string>

namespace titan::bench {

struct StartupBenchOptions {
  std::string flavor = "1B";  // llama3, compared on both paths
  int64_t fsdp = 4;           // its data_parallel_shard_degree (the job's ranks)
  std::string weights;        // its checkpoint.initial_load_path ("": drawn from the seed)
  std::string large_flavor;   // llama3 flavor rehearsed on the new path only ("" to skip)
  int64_t large_fsdp = 128, large_tp = 8;
  int repeats = 3;  // medians reported
  std::string json_path;
};

int run_startup_bench(const StartupBenchOptions& options);

}  // namespace titan::bench
