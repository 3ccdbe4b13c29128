#include "bench/float8_bench.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/json_report.h"
#include "bench/peer_process.h"
#include "bench/timing.h"
#include "bench/train_bench.h"
#include "bench/training_jobs.h"
#include "titan/autograd/engine.h"
#include "titan/core/error.h"
#include "titan/models/model_spec.h"
#include "titan/nn/float8_recipe.h"
#include "titan/nn/functional.h"
#include "titan/ops/cpu/isa.h"

namespace titan::bench {
namespace {

namespace fs = std::filesystem;

struct Recipe {
  std::string name;
  std::string peer;     // float8_peer.py's name for it ("": no peer run)
  std::string options;  // the converter keys, as TorchTitan's configs give them
};

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> all = {
      {"bf16", "bf16", ""},
      {"float8 tensorwise", "tensorwise",
       "--model.converters quantize.linear.float8 --quantize.linear.float8.filter_fqns output"},
      {"float8 rowwise", "rowwise",
       "--model.converters quantize.linear.float8 --quantize.linear.float8.filter_fqns output "
       "--quantize.linear.float8.recipe_name rowwise"},
      {"mxfp8", "mxfp8", "--model.converters quantize.linear.mx"},
      // Tensorwise with FSDP's float8 all-gather, the scales precomputed once per step (TorchTitan's 70B+ setting).
      {"float8 all-gather", "",
       "--model.converters quantize.linear.float8 --quantize.linear.float8.filter_fqns output "
       "--quantize.linear.float8.enable_fsdp_float8_all_gather true "
       "--quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp true"},
  };
  return all;
}

// The CPU's model name and its AVX-512 / AMX flags, from /proc/cpuinfo: what
// the float8 casts' kernels and the bf16 GEMMs under them can use.
std::pair<std::string, std::string> cpu_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string model = "unknown CPU", flags;
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && model == "unknown CPU") model = value;
    if (key == "flags" && flags.empty()) {
      std::istringstream words(value);
      std::set<std::string> wanted;
      for (std::string word; words >> word;)
        if (word.rfind("avx512", 0) == 0 || word.rfind("amx", 0) == 0) wanted.insert(word);
      for (const std::string& word : wanted) flags += (flags.empty() ? "" : " ") + word;
      if (flags.empty()) flags = "(none)";
    }
  }
  return {model, flags};
}

// "titan: quantize.linear.float8 (rowwise) on 42 Linear(s)" in the job's log:
// how many Linears the converter changed (0 for bf16).
int converted_linears(const fs::path& log) {
  std::ifstream in(log);
  const std::regex pattern(R"(\) on ([0-9]+) Linear\(s\))");
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (std::regex_search(line, match, pattern)) return std::stoi(match[1].str());
  }
  return 0;
}

std::string job_options(const Float8BenchOptions& o, const fs::path& data, int64_t seq_len, int64_t batch, int steps,
                        const Recipe& recipe) {
  return fmt::format(
      "--config {} --training.dataset_path {} --model.tokenizer_path {}/tokenizer.json --training.steps {} "
      "--training.seq_len {} --training.local_batch_size {} --validation.enable false --checkpoint.enable false "
      "--metrics.log_freq 1 --metrics.peak_tflops 1 --training.memory_check false {}",
      shared_file("configs/llama3_debug.toml"), data.string(), data.string(), steps, seq_len, batch, recipe.options);
}

// Median step seconds of steps first..last of the job's metrics.jsonl.
double median_step_seconds(const fs::path& folder, int first, int last) {
  std::vector<double> seconds;
  for (const nlohmann::json& m : metrics_after(folder, first - 1))
    if (m["step"].get<int>() <= last) seconds.push_back(m["step_seconds"]);
  TITAN_CHECK(!seconds.empty(), "bench float8: no step records in {}/metrics.jsonl", folder.string());
  return median(seconds);
}

struct AllGathers {
  int count = 0;
  int64_t bytes_in = 0;   // this rank's shards sent
  int64_t bytes_out = 0;  // the gathered parameters received
};

// The all-gathers of one profiled step, from rank 0's Chrome trace: the
// profiler records every collective with the bytes it moved.
AllGathers all_gathers_in_trace(const fs::path& trace) {
  std::ifstream in(trace);
  TITAN_CHECK(in.good(), "bench float8: no profiler trace at {}", trace.string());
  const nlohmann::json events = nlohmann::json::parse(in)["traceEvents"];
  AllGathers result;
  for (const nlohmann::json& e : events) {
    if (e.value("cat", "") != "comm" || e.value("name", "") != "all_gather") continue;
    ++result.count;
    result.bytes_in += e["args"]["bytes_in"].get<int64_t>();
    result.bytes_out += e["args"]["bytes_out"].get<int64_t>();
  }
  return result;
}

struct RecipeResult {
  int linears = 0;
  double step = 0, fsdp_step = 0, peer_step = -1;
  AllGathers gathers;
};

// The peer's median step per recipe (negative when it could not run).
std::map<std::string, double> peer_steps(const Float8BenchOptions& o) {
  const auto& a = models::model_config("llama3", "debugmodel", o.vocab);
  const std::string environment = peer_isa_environment();
  std::string names;
  for (const Recipe& r : recipes()) {
    if (!r.peer.empty()) names += (names.empty() ? "" : ",") + r.peer;
  }
  const std::string command = fmt::format(
      "{}/usr/bin/python3 {}{} --dim {} --layers {} --heads {} --hidden {} --vocab {} --seq {} "
      "--batch {} --steps {} --warmup 1 --threads {} --recipes {}",
      environment, shared_file("bench/float8_peer.py"), environment.empty() ? "" : " --no-mkldnn", a.dim(),
      a.n_layers(), a.layers.front().attention.n_heads, a.layers.front().feed_forward.hidden_dim, o.vocab, o.seq_len,
      o.local_batch, o.steps, omp_get_max_threads(), names);
  std::map<std::string, double> steps;
  const std::optional<nlohmann::json> result = run_peer(command, "float8 bench");
  if (!result) return steps;
  for (const Recipe& r : recipes()) {
    if (r.peer.empty()) continue;
    const std::string key = r.peer + "_step_seconds";
    if (result->contains(key)) steps[r.peer] = (*result)[key].get<double>();
  }
  return steps;
}

// bf16 values of N(0, scale) from `seed`.
Tensor random_bf16(const Shape& shape, uint32_t seed, float scale) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (float& v : values) v = normal(engine);
  return Tensor::from_floats(values, shape).to(DType::bf16);
}

// Median seconds of a forward and backward through `product` (x, w -> y) on fresh leaves.
double forward_backward_seconds(const Tensor& x, const Tensor& w, const Tensor& grad_y,
                                const std::function<Tensor(const Tensor&, const Tensor&)>& product) {
  return median_seconds(
      [&] {
        Tensor xl = x.detach(), wl = w.detach();
        xl.set_requires_grad(true);
        wl.set_requires_grad(true);
        autograd::backward({product(xl, wl)}, {grad_y});
      },
      1, 5);
}

// The GEMMs alone, at widths where they dominate: a Linear of llama3 8B's
// attention (4096 -> 4096) over 1024 tokens, and an MoE layer's experts (8 of
// 1024 -> 1536, 512 tokens each), forward and backward in bf16 against each
// recipe. The training rows above run the debug model, whose widths (256)
// leave the casts as costly as the GEMMs.
nlohmann::json gemm_rows() {
  nlohmann::json rows = nlohmann::json::array();
  const Tensor x = random_bf16({1024, 4096}, 1, 1.0f), w = random_bf16({4096, 4096}, 2, 0.02f);
  const Tensor gy = random_bf16({1024, 4096}, 3, 1e-3f);
  const double linear_bf16 =
      forward_backward_seconds(x, w, gy, [](const Tensor& a, const Tensor& b) { return F::linear(a, b); });
  std::printf("\nthe GEMMs alone, forward + backward, bf16 operands, median of 5:\n%-42s %9s %7s\n", "case", "ms",
              "vs bf16");
  const auto row = [&](const std::string& name, double seconds, double base) {
    std::printf("%-42s %9.1f %6.2fx\n", name.c_str(), 1e3 * seconds, seconds / base);
    rows.push_back({{"case", name}, {"seconds", seconds}, {"vs_bf16", seconds / base}});
  };
  row("Linear 1024 x 4096 -> 4096, bf16", linear_bf16, linear_bf16);
  for (const char* name : {"tensorwise", "rowwise", "mxfp8"}) {
    const nn::Float8LinearRecipe recipe = nn::float8_linear_recipe(name);
    row(fmt::format("Linear 1024 x 4096 -> 4096, {}", name),
        forward_backward_seconds(
            x, w, gy, [&](const Tensor& a, const Tensor& b) { return F::float8_linear(a, b, Tensor(), recipe); }),
        linear_bf16);
  }
  const Tensor rows_in = random_bf16({4096, 1024}, 4, 1.0f), experts = random_bf16({8, 1536, 1024}, 5, 0.02f);
  const Tensor experts_gy = random_bf16({4096, 1536}, 6, 1e-3f);
  const Tensor counts = Tensor::full({8}, 512.0, DType::i64);
  const double grouped_bf16 = forward_backward_seconds(
      rows_in, experts, experts_gy, [&](const Tensor& a, const Tensor& b) { return F::grouped_gemm(a, b, counts); });
  row("experts 8 x 512 x 1024 -> 1536, bf16", grouped_bf16, grouped_bf16);
  for (const auto& [name, converter] : std::vector<std::pair<std::string, std::string>>{
           {"float8", "quantize.grouped_mm.float8"}, {"mxfp8", "quantize.grouped_mm.mx"}}) {
    const ops::Float8Cast cast = nn::float8_grouped_recipe(converter, "mxfp8");
    row(fmt::format("experts 8 x 512 x 1024 -> 1536, {}", name),
        forward_backward_seconds(
            rows_in, experts, experts_gy,
            [&](const Tensor& a, const Tensor& b) { return F::float8_grouped_gemm(a, b, counts, cast); }),
        grouped_bf16);
  }
  std::fflush(stdout);
  return rows;
}

}  // namespace

int run_float8_bench(const Float8BenchOptions& o) {
  const auto [cpu, flags] = cpu_description();
  const int threads = omp_get_max_threads();
  std::printf("titan bench float8: CPU %s, %u cores, AVX-512 and AMX flags: %s; CPU kernels %s\n", cpu.c_str(),
              std::thread::hardware_concurrency(), flags.c_str(), ops::cpu::selected_isa());
  if (!o.training) {
    write_json_report(o.json_path, {{"suite", "float8"},
                                    {"cpu", cpu},
                                    {"kernels", ops::cpu::selected_isa()},
                                    {"threads", threads},
                                    {"gemms", gemm_rows()}});
    return 0;
  }
  std::printf(
      "llama3 debugmodel, bf16 params, median of steps 2..%d; one process (%d threads): seq %lld x batch %lld; "
      "FSDP %d ranks x 1 thread: seq %lld x batch %lld per rank\n\n",
      o.steps + 1, threads, static_cast<long long>(o.seq_len), static_cast<long long>(o.local_batch), o.fsdp_ranks,
      static_cast<long long>(o.fsdp_seq_len), static_cast<long long>(o.fsdp_local_batch));
  std::fflush(stdout);
  const fs::path root = fs::temp_directory_path() / "titan_bench_float8";
  const fs::path data = bench_corpus();
  std::vector<RecipeResult> results(recipes().size());
  for (size_t i = 0; i < recipes().size(); ++i) {
    const Recipe& recipe = recipes()[i];
    const fs::path single = root / fmt::format("single_{}", i);
    run_training_job(recipe.name, 1, threads, single,
                     job_options(o, data, o.seq_len, o.local_batch, o.steps + 1, recipe));
    results[i].step = median_step_seconds(single, 2, o.steps + 1);
    results[i].linears = converted_linears(single.string() + ".log");
    if (o.fsdp_ranks > 0) {
      // One more step, profiled, for the all-gathers; the step time leaves it out.
      const int last = o.steps + 2;
      const fs::path sharded = root / fmt::format("fsdp_{}", i);
      run_training_job(recipe.name + " under FSDP", o.fsdp_ranks, 1, sharded,
                       job_options(o, data, o.fsdp_seq_len, o.fsdp_local_batch, last, recipe) +
                           fmt::format(" --parallelism.data_parallel_shard_degree {} --profiling.enable_profiling "
                                       "true --profiling.profile_freq {}",
                                       o.fsdp_ranks, last));
      results[i].fsdp_step = median_step_seconds(sharded, 2, last - 1);
      results[i].gathers =
          all_gathers_in_trace(sharded / "profile_traces" / fmt::format("iteration_{}", last) / "rank0_trace.json");
    }
  }
  std::map<std::string, double> peer;
  if (o.peer) peer = peer_steps(o);
  for (size_t i = 0; i < recipes().size(); ++i) {
    const auto found = recipes()[i].peer.empty() ? peer.end() : peer.find(recipes()[i].peer);
    if (found != peer.end()) results[i].peer_step = found->second;
  }

  std::printf("%-18s %7s %9s %7s | %10s %7s %13s %8s | %10s %7s\n", "recipe", "Linears", "step ms", "vs bf16",
              "FSDP ms", "vs bf16", "AG MB/step", "gathers", "torch ms", "vs bf16");
  const RecipeResult& base = results.front();
  nlohmann::json cases = nlohmann::json::array();
  for (size_t i = 0; i < recipes().size(); ++i) {
    const RecipeResult& r = results[i];
    const double fsdp_ratio = base.fsdp_step > 0 ? r.fsdp_step / base.fsdp_step : 0.0;
    const double peer_ratio = base.peer_step > 0 && r.peer_step > 0 ? r.peer_step / base.peer_step : 0.0;
    const std::string peer_columns =
        r.peer_step > 0 ? fmt::format("{:10.1f} {:6.2f}x", 1e3 * r.peer_step, peer_ratio) : fmt::format("{:>18}", "-");
    std::printf("%-18s %7d %9.1f %6.2fx | %10.1f %6.2fx %13.3f %8d | %s\n", recipes()[i].name.c_str(), r.linears,
                1e3 * r.step, r.step / base.step, 1e3 * r.fsdp_step, fsdp_ratio,
                static_cast<double>(r.gathers.bytes_out) / 1e6, r.gathers.count, peer_columns.c_str());
    cases.push_back({{"recipe", recipes()[i].name},
                     {"options", recipes()[i].options},
                     {"converted_linears", r.linears},
                     {"step_seconds", r.step},
                     {"step_vs_bf16", r.step / base.step},
                     {"fsdp_step_seconds", r.fsdp_step},
                     {"fsdp_step_vs_bf16", fsdp_ratio},
                     {"fsdp_all_gathers_per_step", r.gathers.count},
                     {"fsdp_all_gather_bytes_gathered_per_step", r.gathers.bytes_out},
                     {"fsdp_all_gather_bytes_sent_per_step", r.gathers.bytes_in},
                     {"torch_step_seconds", r.peer_step},
                     {"torch_step_vs_bf16", peer_ratio}});
  }
  std::printf(
      "\nAG MB/step: the bytes rank 0's all-gathers returned in the profiled step (its trace's comm events; it sent "
      "1/%d of them). Only the float8 all-gather row gathers its converted weights as e4m3 codes (and runs no peer); "
      "the others gather bf16 weights.\n",
      std::max(o.fsdp_ranks, 1));
  write_json_report(o.json_path, {{"suite", "float8"},
                                  {"cpu", cpu},
                                  {"cpu_flags", flags},
                                  {"kernels", ops::cpu::selected_isa()},
                                  {"threads", threads},
                                  {"steps", o.steps},
                                  {"seq_len", o.seq_len},
                                  {"local_batch", o.local_batch},
                                  {"fsdp_ranks", o.fsdp_ranks},
                                  {"fsdp_seq_len", o.fsdp_seq_len},
                                  {"fsdp_local_batch", o.fsdp_local_batch},
                                  {"cases", cases},
                                  {"gemms", gemm_rows()}});
  return 0;
}

}  // namespace titan::bench
