#include "bench/plan_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/json_report.h"
#include "bench/timing.h"
#include "bench/training_jobs.h"
#include "titan/core/error.h"
#include "titan/parallel/pipeline_schedule.h"
#include "titan/plan/cost_model.h"
#include "titan/plan/device_profile.h"
#include "titan/plan/layout.h"

namespace titan::bench {
namespace {

namespace fs = std::filesystem;
constexpr double kPlanBenchGiB = 1024.0 * 1024.0 * 1024.0;

struct PlanBenchCase {
  std::string name;   // short: "fsdp2_tp2"
  std::string model;  // llama3, qwen3_moe
  int ranks = 1;
  plan::Layout layout;
};

struct PlanBenchRow {
  PlanBenchCase c;
  plan::StepPrediction predicted;
  double measured_step_seconds = 0.0;
  double measured_peak_gib = 0.0;
  double measured_tokens_per_second_per_device = 0.0;
  // The job's own account of its step (medians after warm-up), to tell which predicted term misses.
  double comm_busy_seconds = 0.0, comm_exposed_seconds = 0.0, bubble_seconds = 0.0;
  double load_average = 0.0;  // the machine's 1-minute load when the job ended (other processes share its cores)
  double wall_seconds = 0.0;
  double profile_gflops = 0.0;  // the profile's bf16 GEMM peak per rank, measured right before the job
};

// A layout of `ranks` devices for the bench's fixed global batch: the data-
// parallel ranks split it, pipelines split each rank's share into
// single-sequence micro-batches.
plan::Layout plan_bench_layout(int64_t global_batch, int64_t dp_shard, int64_t tp, int64_t pp, int64_t cp,
                               int64_t ep = 1, const std::string& schedule = "") {
  plan::Layout l;
  l.dp_shard = dp_shard;
  l.tp = tp;
  l.pp = pp;
  l.cp = cp;
  l.ep = ep;
  l.local_batch_size = global_batch / dp_shard;
  TITAN_CHECK(l.local_batch_size * dp_shard == global_batch,
              "bench plan: the global batch {} does not divide over {} data-parallel ranks", global_batch, dp_shard);
  if (pp > 1) {
    l.pipeline_schedule = schedule;
    l.stages_per_rank = parallel::pipeline::stages_per_rank(schedule);
    l.microbatch_size = 1;
  }
  return l;
}

std::vector<PlanBenchCase> plan_bench_cases(const PlanBenchOptions& o) {
  const int64_t b = o.global_batch;
  std::vector<PlanBenchCase> all = {
      {"plain", "llama3", 1, plan_bench_layout(b, 1, 1, 1, 1)},
      {"fsdp2", "llama3", 2, plan_bench_layout(b, 2, 1, 1, 1)},
      {"tp2", "llama3", 2, plan_bench_layout(b, 1, 2, 1, 1)},
      {"pp2_1f1b", "llama3", 2, plan_bench_layout(b, 1, 1, 2, 1, 1, "1F1B")},
      {"pp2_gpipe", "llama3", 2, plan_bench_layout(b, 1, 1, 2, 1, 1, "GPipe")},
      {"pp2_interleaved", "llama3", 2, plan_bench_layout(b, 1, 1, 2, 1, 1, "Interleaved1F1B")},
      {"cp2", "llama3", 2, plan_bench_layout(b, 1, 1, 1, 2)},
      {"fsdp4", "llama3", 4, plan_bench_layout(b, 4, 1, 1, 1)},
      {"fsdp2_tp2", "llama3", 4, plan_bench_layout(b, 2, 2, 1, 1)},
      {"pp2_fsdp2", "llama3", 4, plan_bench_layout(b, 2, 1, 2, 1, 1, "1F1B")},
      {"cp2_fsdp2", "llama3", 4, plan_bench_layout(b, 2, 1, 1, 2)},
  };
  if (o.moe) {
    const std::vector<PlanBenchCase> moe = {
        {"moe_plain", "qwen3_moe", 1, plan_bench_layout(b, 1, 1, 1, 1)},
        {"moe_fsdp2", "qwen3_moe", 2, plan_bench_layout(b, 2, 1, 1, 1)},
        {"moe_fsdp2_ep2", "qwen3_moe", 2, plan_bench_layout(b, 2, 1, 1, 1, 2)},
        {"moe_fsdp4", "qwen3_moe", 4, plan_bench_layout(b, 4, 1, 1, 1)},
        {"moe_fsdp4_ep4", "qwen3_moe", 4, plan_bench_layout(b, 4, 1, 1, 1, 4)},
    };
    all.insert(all.end(), moe.begin(), moe.end());
  }
  std::vector<PlanBenchCase> chosen;
  for (const PlanBenchCase& c : all) {
    if (std::find(o.ranks.begin(), o.ranks.end(), c.ranks) != o.ranks.end()) chosen.push_back(c);
  }
  return chosen;
}

plan::PlanRequest plan_bench_request(const PlanBenchOptions& o, const PlanBenchCase& c) {
  plan::PlanRequest r;
  r.model = c.model;
  r.flavor = "debugmodel";
  r.vocab_size = 2048;  // bench_corpus's tokenizer, which is also the debug flavors' own
  r.devices = c.ranks;
  r.devices_per_node = c.ranks;  // one machine
  r.seq_len = o.seq_len;
  r.global_batch_tokens = o.global_batch * o.seq_len;
  r.compute_dtype = DType::bf16;  // the debug configs' mixed_precision_param
  return r;
}

double plan_bench_load_average() {
  std::ifstream in("/proc/loadavg");
  double load = 0.0;
  in >> load;
  return load;
}

// The largest per-step peak of any rank the metrics show: rank 0's own, and
// the per-rank arrays of the pipeline and context-parallel groups (only rank 0
// writes metrics.jsonl; the other FSDP/TP/EP ranks hold the same shapes).
double plan_bench_peak_gib(const std::vector<nlohmann::json>& records) {
  double peak = 0.0;
  for (const nlohmann::json& record : records) {
    for (const auto& [key, value] : record.items()) {
      if (key != "peak_memory_gib" && !key.ends_with("rank_peak_memory_gib")) continue;
      if (value.is_number()) peak = std::max(peak, value.get<double>());
      if (value.is_array()) {
        for (const auto& rank : value) peak = std::max(peak, rank.get<double>());
      }
    }
  }
  return peak;
}

PlanBenchRow plan_bench_measure(const PlanBenchOptions& o, const PlanBenchCase& c, const plan::DeviceProfile& profile,
                                const fs::path& data, const fs::path& root) {
  PlanBenchRow row;
  row.c = c;
  const plan::PlanRequest request = plan_bench_request(o, c);
  row.predicted = plan::predict_step(plan::model_under_plan(request), request, c.layout, profile);
  row.profile_gflops = profile.bf16_flops / 1e9;

  // The job the prediction describes, as `titan plan` would emit it; only the
  // corpus, the step count and the console's progress are the bench's.
  fs::create_directories(root);
  const fs::path toml = root / (c.name + ".toml");
  std::ofstream(toml) << plan::layout_job_toml(c.layout, request);
  const fs::path folder = root / c.name;
  const auto start = std::chrono::steady_clock::now();
  run_training_job(c.name, c.ranks, profile.threads_per_rank, folder,
                   fmt::format("--config {} --training.dataset_path {} --model.tokenizer_path {}/tokenizer.json "
                               "--training.steps {} --metrics.progress false",
                               toml.string(), data.string(), data.string(), o.warmup + o.steps));
  row.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  row.load_average = plan_bench_load_average();

  const std::vector<nlohmann::json> all = metrics_after(folder, 0);
  const std::vector<nlohmann::json> timed = metrics_after(folder, o.warmup);
  TITAN_CHECK(!timed.empty(), "bench plan: the {} job wrote no step after warm-up (see {}.log)", c.name,
              folder.string());
  std::vector<double> step, busy, exposed, bubble;
  for (const nlohmann::json& m : timed) {
    const double seconds = m["step_seconds"];
    step.push_back(seconds);
    busy.push_back(m["comm_busy_seconds"]);
    exposed.push_back(m["comm_exposed_seconds"]);
    bubble.push_back(m.value("pipeline_bubble", 0.0) * seconds);
  }
  row.measured_step_seconds = median(step);
  row.comm_busy_seconds = median(busy);
  row.comm_exposed_seconds = median(exposed);
  row.bubble_seconds = median(bubble);
  row.measured_peak_gib = plan_bench_peak_gib(all);
  row.measured_tokens_per_second_per_device =
      static_cast<double>(o.global_batch * o.seq_len) / row.measured_step_seconds / c.ranks;
  return row;
}

double plan_bench_comm_busy(const plan::StepPrediction& p) {
  double busy = 0.0;
  for (const plan::CommCost& comm : p.comm) busy += comm.busy_seconds;
  return busy;
}

bool plan_bench_within(double ratio, double tolerance) { return ratio >= 1.0 - tolerance && ratio <= 1.0 + tolerance; }

struct PlanBenchRanking {
  std::string group;                             // "llama3, 2 ranks"
  std::vector<std::string> predicted, measured;  // case names, fastest first
  std::string predicted_best, measured_best;
  double best_gap = 0.0;  // how much slower the predicted best measured than the measured best (0: the same)
  bool ok = true;
};

std::vector<PlanBenchRanking> plan_bench_rankings(const std::vector<PlanBenchRow>& rows) {
  std::map<std::pair<std::string, int>, std::vector<const PlanBenchRow*>> groups;
  for (const PlanBenchRow& r : rows) groups[{r.c.model, r.c.ranks}].push_back(&r);
  std::vector<PlanBenchRanking> out;
  for (auto& [key, group_members] : groups) {
    const std::vector<const PlanBenchRow*>& members = group_members;  // a lambda may not capture a binding (C++20)
    PlanBenchRanking ranking;
    ranking.group = fmt::format("{}, {} rank{}", key.first, key.second, key.second > 1 ? "s" : "");
    auto by = [&](auto tokens) {
      std::vector<const PlanBenchRow*> sorted = members;
      std::stable_sort(sorted.begin(), sorted.end(),
                       [&](const PlanBenchRow* a, const PlanBenchRow* b) { return tokens(*a) > tokens(*b); });
      std::vector<std::string> names;
      for (const PlanBenchRow* r : sorted) names.push_back(r->c.name);
      return std::pair{names, sorted.front()};
    };
    const auto [predicted, predicted_best] =
        by([](const PlanBenchRow& r) { return r.predicted.tokens_per_second_per_device; });
    const auto [measured, measured_best] =
        by([](const PlanBenchRow& r) { return r.measured_tokens_per_second_per_device; });
    ranking.predicted = predicted;
    ranking.measured = measured;
    ranking.predicted_best = predicted_best->c.name;
    ranking.measured_best = measured_best->c.name;
    ranking.best_gap = 1.0 - predicted_best->measured_tokens_per_second_per_device /
                                 measured_best->measured_tokens_per_second_per_device;
    ranking.ok = ranking.best_gap <= 0.05;
    out.push_back(ranking);
  }
  return out;
}

}  // namespace

int run_plan_bench(const PlanBenchOptions& o) {
  const auto bench_start = std::chrono::steady_clock::now();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf(
      "titan bench plan: the cost model against `titan train` on this machine (%d cores): debug models, seq %lld x "
      "%lld sequences per step on every layout, median of %d steps after %d warm-up. load: the 1-minute load "
      "average as each job ended (other processes share the cores); GFLOP/s: the profile's bf16 GEMM rate per rank, "
      "measured right before the job\n\n",
      cores, static_cast<long long>(o.seq_len), static_cast<long long>(o.global_batch), o.steps, o.warmup);
  const fs::path root = fs::temp_directory_path() / "titan_bench_plan";
  const fs::path data = bench_corpus();

  // The links once per rank count (an mpirun of its own); the compute side
  // of the profile again right before each job, as its ranks will run (their
  // threads each, the machine's cores shared): other processes on a shared
  // machine change what a core delivers from one minute to the next, and the
  // prediction should see the machine the job is about to see.
  std::map<int, plan::DeviceProfile> links;
  std::vector<PlanBenchRow> rows;
  std::printf("%-16s %5s %9s %9s %6s %9s %9s %6s %6s %8s\n", "layout", "ranks", "pred s", "meas s", "ratio", "pred MiB",
              "meas MiB", "ratio", "load", "GFLOP/s");
  for (const PlanBenchCase& c : plan_bench_cases(o)) {
    plan::CpuProbeOptions probe;
    probe.ranks_per_node = c.ranks;
    probe.threads_per_rank = std::max(1, cores / c.ranks);
    probe.titan_executable = titan_executable();
    if (!links.contains(c.ranks)) {
      probe.measure_links = o.probe_links && c.ranks > 1;
      links.emplace(c.ranks, plan::measure_cpu_profile(probe));
    }
    probe.measure_links = false;
    plan::DeviceProfile profile = plan::measure_cpu_profile(probe);
    profile.intra_node = links.at(c.ranks).intra_node;
    profile.inter_node = links.at(c.ranks).inter_node;
    profile.collective_overhead_seconds = links.at(c.ranks).collective_overhead_seconds;
    profile.contended_collective_seconds = links.at(c.ranks).contended_collective_seconds;
    const PlanBenchRow r = plan_bench_measure(o, c, profile, data, root);
    const double pred_gib = r.predicted.memory_bytes / kPlanBenchGiB;
    std::printf("%-16s %5d %9.3f %9.3f %6.2f %9.1f %9.1f %6.2f %6.1f %8.1f\n", c.name.c_str(), c.ranks,
                r.predicted.step_seconds, r.measured_step_seconds, r.predicted.step_seconds / r.measured_step_seconds,
                pred_gib * 1024.0, r.measured_peak_gib * 1024.0, pred_gib / r.measured_peak_gib, r.load_average,
                r.profile_gflops);
    std::fflush(stdout);
    rows.push_back(r);
  }

  // Where the step goes, predicted beside the job's own account, to tell which term misses.
  std::printf("\n%-16s %8s %8s %8s %8s %8s %8s | %8s %8s %8s  %s\n", "seconds", "compute", "overhd", "optim", "bubble",
              "exp.comm", "comm", "m.bubble", "m.exp", "m.comm", "layout");
  for (const PlanBenchRow& r : rows) {
    const plan::StepPrediction& p = r.predicted;
    std::printf("%-16s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f | %8.3f %8.3f %8.3f  %s\n", r.c.name.c_str(),
                p.compute_seconds, p.overhead_seconds, p.optimizer_seconds, p.bubble_seconds, p.exposed_comm_seconds,
                plan_bench_comm_busy(p), r.bubble_seconds, r.comm_exposed_seconds, r.comm_busy_seconds,
                r.c.layout.describe().c_str());
  }

  int within = 0;
  for (const PlanBenchRow& r : rows) {
    const bool ok = plan_bench_within(r.predicted.step_seconds / r.measured_step_seconds, 0.25) &&
                    plan_bench_within(r.predicted.memory_bytes / kPlanBenchGiB / r.measured_peak_gib, 0.25);
    within += ok ? 1 : 0;
  }
  const std::vector<PlanBenchRanking> rankings = plan_bench_rankings(rows);
  std::printf("\nranking by tokens/s per device (fastest first):\n");
  int rankings_ok = 0;
  for (const PlanBenchRanking& k : rankings) {
    std::printf(
        "  %-18s predicted %s\n  %-18s measured  %s\n  %-18s predicted best %s %s\n", k.group.c_str(),
        fmt::format("{}", fmt::join(k.predicted, " > ")).c_str(), "",
        fmt::format("{}", fmt::join(k.measured, " > ")).c_str(), "", k.predicted_best.c_str(),
        k.predicted_best == k.measured_best
            ? "is the measured best"
            : fmt::format("measured {:.1f}% slower than the best ({})", 100.0 * k.best_gap, k.measured_best).c_str());
    rankings_ok += k.ok ? 1 : 0;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - bench_start).count();
  std::printf(
      "\n%d of %zu layouts with step time and peak memory within 25%%; predicted best within 5%% of the measured "
      "best in %d of %zu groups (%.0f s)\n",
      within, rows.size(), rankings_ok, rankings.size(), wall);

  nlohmann::json layouts = nlohmann::json::array();
  for (const PlanBenchRow& r : rows) {
    const plan::StepPrediction& p = r.predicted;
    layouts.push_back({{"name", r.c.name},
                       {"model", r.c.model},
                       {"ranks", r.c.ranks},
                       {"layout", r.c.layout.describe()},
                       {"predicted_step_seconds", p.step_seconds},
                       {"measured_step_seconds", r.measured_step_seconds},
                       {"predicted_peak_gib", p.memory_bytes / kPlanBenchGiB},
                       {"measured_peak_gib", r.measured_peak_gib},
                       {"predicted_tokens_per_second_per_device", p.tokens_per_second_per_device},
                       {"measured_tokens_per_second_per_device", r.measured_tokens_per_second_per_device},
                       {"predicted_compute_seconds", p.compute_seconds},
                       {"predicted_overhead_seconds", p.overhead_seconds},
                       {"predicted_optimizer_seconds", p.optimizer_seconds},
                       {"predicted_bubble_seconds", p.bubble_seconds},
                       {"predicted_exposed_comm_seconds", p.exposed_comm_seconds},
                       {"predicted_comm_busy_seconds", plan_bench_comm_busy(p)},
                       {"measured_bubble_seconds", r.bubble_seconds},
                       {"measured_comm_exposed_seconds", r.comm_exposed_seconds},
                       {"measured_comm_busy_seconds", r.comm_busy_seconds},
                       {"load_average", r.load_average},
                       {"profile_bf16_gflops", r.profile_gflops},
                       {"wall_seconds", r.wall_seconds}});
  }
  nlohmann::json ranking_json = nlohmann::json::array();
  for (const PlanBenchRanking& k : rankings) {
    ranking_json.push_back({{"group", k.group},
                            {"predicted", k.predicted},
                            {"measured", k.measured},
                            {"predicted_best", k.predicted_best},
                            {"measured_best", k.measured_best},
                            {"predicted_best_gap", k.best_gap},
                            {"within_5_percent", k.ok}});
  }
  write_json_report(
      o.json_path,
      {{"layouts", layouts}, {"rankings", ranking_json}, {"within_25_percent", within}, {"wall_seconds", wall}});
  return 0;
}

}  // namespace titan::bench
