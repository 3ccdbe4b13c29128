#include "bench/training_jobs.h"

#include <cstdlib>
#include <fstream>

#include "titan/core/error.h"

namespace titan::bench {

namespace fs = std::filesystem;

std::string titan_executable() { return fs::read_symlink("/proc/self/exe").string(); }

fs::path bench_corpus() {
  const fs::path root = fs::temp_directory_path() / "titan_bench_corpus";
  const fs::path data = root / "data";
  fs::create_directories(root);
  if (!fs::exists(data / "manifest.json")) {
    const std::string prepare = fmt::format("{} data prepare --train-tokenizer 2048 --output {} > {}/prepare.log 2>&1",
                                            titan_executable(), data.string(), root.string());
    TITAN_CHECK(std::system(prepare.c_str()) == 0, "bench: data prepare failed (see {}/prepare.log)", root.string());
  }
  return data;
}

void run_training_job(const std::string& what, int ranks, int threads, const fs::path& folder,
                      const std::string& arguments, const std::string& executable) {
  const std::string train =
      fmt::format("{} train --job.dump_folder {} {}", executable.empty() ? titan_executable() : executable,
                  folder.string(), arguments);
  // Waiting ranks yield their core (ranks may outnumber cores).
  const std::string command = ranks == 1
                                  ? fmt::format("OMP_NUM_THREADS={} {}", threads, train)
                                  : fmt::format(
                                        "mpirun --allow-run-as-root --oversubscribe -np {} -x OMP_NUM_THREADS={} "
                                        "-x OMPI_MCA_mpi_yield_when_idle=1 {}",
                                        ranks, threads, train);
  fs::remove_all(folder);
  fs::create_directories(folder.parent_path());
  const std::string log = folder.string() + ".log";
  TITAN_CHECK(std::system((command + " > " + log + " 2>&1").c_str()) == 0, "bench: the {} run failed (see {})", what,
              log);
}

std::vector<nlohmann::json> metrics_after(const fs::path& folder, int warmup) {
  std::vector<nlohmann::json> records;
  std::ifstream metrics(folder / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    nlohmann::json record = nlohmann::json::parse(line);
    // The closing goodput record has no step.
    if (record.contains("step") && record["step"].get<int>() > warmup) records.push_back(std::move(record));
  }
  return records;
}

}  // namespace titan::bench
