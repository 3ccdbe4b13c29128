#include "bench/failures_bench.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/json_report.h"
#include "bench/timing.h"
#include "bench/training_jobs.h"
#include "titan/core/error.h"
#include "titan/ops/cpu/isa.h"

namespace titan::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// One launch of a job of `ranks` ranks on 2 "nodes"; returns its exit status and wall seconds.
struct Launch {
  int status = 0;
  double seconds = 0.0;
};

Launch launch_two_node_job(int ranks, const fs::path& dump, const std::string& arguments, int64_t kill_after,
                           const fs::path& log) {
  const std::string kill = kill_after > 0 ? fmt::format("-x TITAN_TEST_SIGKILL_AFTER_STEP={} ", kill_after) : "";
  const std::string command = fmt::format(
      "mpirun --allow-run-as-root --oversubscribe -np {} -x OMP_NUM_THREADS=1 -x OMPI_MCA_mpi_yield_when_idle=1 "
      "--mca btl tcp,self {}{}/../tests/scripts/as_node.sh {} {} train --job.dump_folder {} {} >> {} 2>&1",
      ranks, kill, TITAN_BENCH_DIR, ranks / 2, titan_executable(), dump.string(), arguments, log.string());
  const auto start = std::chrono::steady_clock::now();
  Launch launch;
  launch.status = std::system(command.c_str());
  launch.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return launch;
}

fs::path write_llama_config(const fs::path& folder, int64_t dim, int64_t hidden, int64_t layers, int64_t heads,
                            int64_t kv_heads) {
  fs::create_directories(folder);
  const fs::path path = folder / "config.json";
  std::ofstream(path) << json{
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", dim},
      {"intermediate_size", hidden},
      {"num_hidden_layers", layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads", kv_heads},
      {"vocab_size", 2048},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 500000.0},
      {"max_position_embeddings", 2048},
      {"tie_word_embeddings",
       false}}.dump();
  return path;
}

std::string common_arguments(const fs::path& config_json, const fs::path& corpus, int fsdp) {
  return fmt::format(
      "--config {}/../configs/llama3_debug.toml --model.hf_config {} --training.dataset_path {} "
      "--model.tokenizer_path {}/tokenizer.json --training.seq_len 64 --training.local_batch_size 1 "
      "--parallelism.data_parallel_shard_degree {} --training.mixed_precision_param f32 --validation.enable false "
      "--lr_scheduler.warmup_steps 2 --metrics.peak_tflops 1 --metrics.progress false --metrics.log_freq 1 "
      "--checkpoint.enable true",
      TITAN_BENCH_DIR, config_json.string(), corpus.string(), corpus.string(), fsdp);
}

std::vector<json> jsonl_records(const fs::path& path) {
  std::vector<json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) records.push_back(json::parse(line, nullptr, false));
  return records;
}

// The goodput record the last run of a job appended.
json last_goodput(const fs::path& dump) {
  json found;
  for (const json& record : jsonl_records(dump / "metrics.jsonl")) {
    if (record.is_object() && record.contains("goodput")) found = record["goodput"];
  }
  return found;
}

std::vector<double> step_field(const fs::path& dump, const char* field) {
  std::vector<double> values;
  for (const json& record : jsonl_records(dump / "metrics.jsonl")) {
    if (record.is_object() && record.contains("step") && record.contains(field) && record[field].get<double>() > 0)
      values.push_back(record[field].get<double>());
  }
  return values;
}

struct TierCosts {
  double fast = 0, replica = 0, persistent = 0;                          // median stall per save, seconds
  double recover_fast = 0, recover_replica = 0, recover_persistent = 0;  // seconds to restore
  double state_gb = 0;
};

TierCosts measure_tiers(const FailuresBenchOptions& options, const fs::path& root, const fs::path& corpus) {
  const fs::path config = write_llama_config(root / "model_1b", 2048, 8192, options.layers, 32, 8);
  const std::string shm = "/dev/shm/titan_failures_bench";
  const std::string arguments = common_arguments(config, corpus, 4) +
                                fmt::format(
                                    " --training.steps 6 --checkpoint.interval 2 --checkpoint.local_interval 1 "
                                    "--checkpoint.local_folder {}",
                                    shm);
  const fs::path killed = root / "tiers_killed";
  fs::remove_all(killed);
  fs::remove_all(shm);
  const fs::path log = root / "tiers.log";
  fs::remove(log);
  // Every rank is killed after step 5: fast tier at 1..5, persistent at 2 and 4.
  const Launch first = launch_two_node_job(4, killed, arguments, 5, log);
  TITAN_CHECK(first.status != 0, "bench failures: the killed run exited normally (see {})", log.string());
  TierCosts costs;
  costs.fast = median(step_field(killed, "fast_tier_stall_seconds"));
  costs.replica = median(step_field(killed, "fast_tier_replica_seconds"));
  costs.persistent = median(step_field(killed, "checkpoint_stall_seconds"));
  for (const auto& entry : fs::recursive_directory_iterator(killed / "checkpoint" / "step-000004")) {
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors")
      costs.state_gb += static_cast<double>(entry.file_size()) / 1e9;
  }
  // The same killed job restarted three ways: as it is, without node1's fast tier, without any.
  for (const char* how : {"fast", "replica", "persistent"}) {
    const fs::path dump = root / (std::string("tiers_") + how);
    const std::string local = shm + "_" + how;
    fs::remove_all(dump);
    fs::remove_all(local);
    fs::copy(killed, dump, fs::copy_options::recursive);
    fs::copy(shm, local, fs::copy_options::recursive);
    if (std::string(how) != "fast") fs::remove_all(fs::path(local) / "node1");
    if (std::string(how) == "persistent") fs::remove_all(fs::path(local) / "node0");
    const std::string again = arguments + " --checkpoint.local_folder " + local;
    const Launch run = launch_two_node_job(4, dump, again, 0, log);
    TITAN_CHECK(run.status == 0, "bench failures: the restart from the {} tier failed (see {})", how, log.string());
    const json goodput = last_goodput(dump);
    TITAN_CHECK(goodput.is_object() && goodput.value("restart_tier", "") == how,
                "bench failures: the restart meant for the {} tier resumed from '{}' (see {})", how,
                goodput.is_object() ? goodput.value("restart_tier", "") : "", log.string());
    const double seconds = goodput["recover_seconds"].get<double>();
    (std::string(how) == "fast"      ? costs.recover_fast
     : std::string(how) == "replica" ? costs.recover_replica
                                     : costs.recover_persistent) = seconds;
    fs::remove_all(local);
    fs::remove_all(dump);
  }
  fs::remove_all(shm);
  fs::remove_all(killed);
  return costs;
}

struct JobGoodput {
  double wall = 0;        // every launch, start to exit
  double productive = 0;  // each of the job's steps once (its last run's record)
  int64_t recomputed = 0;
  int launches = 0;
};

JobGoodput failing_job(const FailuresBenchOptions& options, const fs::path& root, const fs::path& corpus,
                       const std::string& name, const std::string& tiers, bool failures) {
  const fs::path config = write_llama_config(root / "model_tiny", 256, 768, 2, 4, 2);
  const fs::path dump = root / name;
  const std::string shm = "/dev/shm/titan_failures_bench_" + name;
  fs::remove_all(dump);
  fs::remove_all(shm);
  const std::string arguments =
      common_arguments(config, corpus, 2) +
      fmt::format(" --training.steps {} --checkpoint.interval 50 --checkpoint.local_folder {} {}", options.steps, shm,
                  tiers);
  const fs::path log = root / (name + ".log");
  fs::remove(log);
  JobGoodput result;
  // A failure one step before each multiple of failure_every: the persistent tier's newest save is then furthest.
  for (int64_t next = options.failure_every - 1;; next += options.failure_every) {
    const bool kill = failures && next < options.steps;
    const Launch run = launch_two_node_job(2, dump, arguments, kill ? next : 0, log);
    result.wall += run.seconds;
    ++result.launches;
    if (!kill) {
      TITAN_CHECK(run.status == 0, "bench failures: job {} failed (see {})", name, log.string());
      break;
    }
    TITAN_CHECK(run.status != 0, "bench failures: job {} was not killed at step {} (see {})", name, next, log.string());
  }
  std::map<int64_t, double> step_seconds;
  int64_t records = 0;
  for (const json& record : jsonl_records(dump / "metrics.jsonl")) {
    if (!record.is_object() || !record.contains("step")) continue;
    ++records;
    step_seconds[record["step"].get<int64_t>()] = record["step_seconds"].get<double>();
  }
  for (const auto& [step, seconds] : step_seconds) result.productive += seconds;
  result.recomputed = records - static_cast<int64_t>(step_seconds.size());
  fs::remove_all(shm);
  fs::remove_all(dump);
  return result;
}

}  // namespace

int run_failures_bench(const FailuresBenchOptions& options) {
  const fs::path root = options.folder;
  fs::create_directories(root);
  const fs::path corpus = bench_corpus();
  std::printf("titan bench failures: CPU kernels %s, 4 ranks as 2 nodes (tests/scripts/as_node.sh), FSDP 4\n",
              ops::cpu::selected_isa());
  std::fflush(stdout);
  const TierCosts costs = measure_tiers(options, root, corpus);
  std::printf(
      "\n(a) llama3 1B shapes cut to %lld blocks (vocab 2048), f32, seq 64 x batch 1 per rank: %.2f GB of weights + "
      "AdamW moments\n",
      static_cast<long long>(options.layers), costs.state_gb);
  std::printf("| tier        | stall per save (median) | time to recover |\n");
  std::printf("|-------------|------------------------:|----------------:|\n");
  std::printf("| fast        | %21.3f s | %13.2f s |\n", costs.fast, costs.recover_fast);
  std::printf("| replica     | %21.3f s | %13.2f s |\n", costs.replica, costs.recover_replica);
  std::printf("| persistent  | %21.3f s | %13.2f s |\n", costs.persistent, costs.recover_persistent);
  std::fflush(stdout);
  const JobGoodput clean = failing_job(options, root, corpus, "no_failures", "", false);
  const JobGoodput persistent = failing_job(options, root, corpus, "persistent_only", "", true);
  const JobGoodput tiered = failing_job(options, root, corpus, "fast_tiers", "--checkpoint.local_interval 5", true);
  std::printf(
      "\n(b) tiny llama (dim 256, 2 layers), FSDP 2 on 2 nodes of 1 rank, %lld steps, every rank killed (SIGKILL) "
      "after step %lld, %lld, ... and "
      "restarted at once; persistent checkpoint every 50 steps\n",
      static_cast<long long>(options.steps), static_cast<long long>(options.failure_every - 1),
      static_cast<long long>(2 * options.failure_every - 1));
  std::printf("| job                                 | launches | wall s | steps recomputed | goodput |\n");
  std::printf("|-------------------------------------|---------:|-------:|-----------------:|--------:|\n");
  const auto row = [](const char* what, const JobGoodput& g) {
    std::printf("| %-35s | %8d | %6.1f | %16lld | %6.1f%% |\n", what, g.launches, g.wall,
                static_cast<long long>(g.recomputed), g.wall > 0 ? 100.0 * g.productive / g.wall : 0.0);
  };
  row("no failures, persistent only", clean);
  row("failures, persistent only", persistent);
  row("failures, + fast tier every 5 + replica", tiered);
  std::printf("(goodput: the job's steps, each counted once, over the wall time of every launch)\n");
  std::fflush(stdout);
  if (!options.json_path.empty()) {
    const auto job = [](const JobGoodput& g) {
      return json{{"launches", g.launches},
                  {"wall_seconds", g.wall},
                  {"productive_seconds", g.productive},
                  {"recomputed_steps", g.recomputed}};
    };
    write_json_report(
        options.json_path,
        {{"layers", options.layers},
         {"state_gb", costs.state_gb},
         {"stall_seconds", {{"fast", costs.fast}, {"replica", costs.replica}, {"persistent", costs.persistent}}},
         {"recover_seconds",
          {{"fast", costs.recover_fast}, {"replica", costs.recover_replica}, {"persistent", costs.recover_persistent}}},
         {"jobs", {{"no_failures", job(clean)}, {"persistent_only", job(persistent)}, {"fast_tiers", job(tiered)}}}});
  }
  return 0;
}

}  // namespace titan::bench
