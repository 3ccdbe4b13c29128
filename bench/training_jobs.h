// Benchmarks that measure whole training jobs (`titan train`, alone or under
// mpirun) share how they run them: this executable, a prepared corpus, a
// checked launch with its output in a log, and the metrics the job wrote.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace titan::bench {

// This titan executable's path (jobs run the same build).
std::string titan_executable();
// A corpus with a 2048-token BPE, prepared once under the temp folder; its folder.
std::filesystem::path bench_corpus();
// `titan train <arguments>` on `ranks` processes (mpirun when more than one,
// each with `threads` OpenMP threads) dumping into `folder`, which starts
// empty; errors name the log of a run that failed. `executable`: another
// titan build to run instead of this one.
void run_training_job(const std::string& what, int ranks, int threads, const std::filesystem::path& folder,
                      const std::string& arguments, const std::string& executable = "");
// Every record of the job's metrics.jsonl after `warmup` steps.
std::vector<nlohmann::json> metrics_after(const std::filesystem::path& folder, int warmup);

}  // namespace titan::bench
