#include "bench/lora_bench.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>
#include <tuple>
#include <utility>

#include "bench/json_report.h"
#include "bench/peer_process.h"
#include "bench/timing.h"
#include "bench/training_jobs.h"
#include "titan/core/error.h"

namespace titan::bench {
namespace {

namespace fs = std::filesystem;

// A model big enough that its frozen weights dominate (about 110M parameters,
// Llama layout), given as a Hugging Face config so no flavor is added for it.
constexpr const char* kMidModelConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
  "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 2048,
  "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
  "tie_word_embeddings": false, "torch_dtype": "float32"
})";

struct Model {
  std::string name;
  std::string options;  // job options choosing it
};

struct LoraCase {
  std::string name;
  std::string options;
};

struct RunResult {
  double tokens_per_second = 0, peak_memory_gib = 0;
  int64_t state_bytes = 0;      // parameters + optimizer state, from the job's banner
  int64_t optimizer_bytes = 0;  // of which the optimizer's moments
};

// "... 1234 bytes of parameters and optimizer state on rank 0 (567 of optimizer
// state)" in the job's log: both numbers.
std::pair<int64_t, int64_t> banner_state_bytes(const fs::path& log) {
  std::ifstream in(log);
  const std::regex pattern("([0-9]+) bytes of parameters and optimizer state on rank 0 \\(([0-9]+) of optimizer");
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (std::regex_search(line, match, pattern)) return {std::stoll(match[1].str()), std::stoll(match[2].str())};
  }
  fail("bench lora: {} has no line naming the bytes of parameters and optimizer state", log.string());
}

RunResult run_case(const LoraBenchOptions& o, const Model& model, const LoraCase& c, const fs::path& data,
                   const fs::path& folder) {
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  run_training_job(model.name + ", " + c.name, 1, threads, folder,
                   fmt::format("--config {} --training.dataset_path {} --model.tokenizer_path {}/tokenizer.json "
                               "--training.steps {} --training.seq_len {} --training.local_batch_size {} "
                               "--training.mixed_precision_param f32 --validation.enable false --metrics.log_freq 1 "
                               "--metrics.peak_tflops 1 --training.memory_check false {} {}",
                               shared_file("configs/llama3_debug.toml"), data.string(), data.string(),
                               o.warmup + o.steps, o.seq_len, o.local_batch, model.options, c.options));
  std::vector<double> tps, memory;
  for (const nlohmann::json& m : metrics_after(folder, o.warmup)) {
    tps.push_back(m["tokens_per_second"]);
    memory.push_back(m["peak_memory_gib"]);
  }
  RunResult result;
  result.tokens_per_second = median(tps);
  result.peak_memory_gib = *std::max_element(memory.begin(), memory.end());
  std::tie(result.state_bytes, result.optimizer_bytes) = banner_state_bytes(folder.string() + ".log");
  return result;
}

}  // namespace

int run_lora_bench(const LoraBenchOptions& o) {
  const fs::path root = fs::temp_directory_path() / "titan_bench_lora";
  fs::create_directories(root);
  const fs::path data = bench_corpus();
  const fs::path mid_config = root / "mid_config.json";
  std::ofstream(mid_config) << kMidModelConfig;
  std::vector<Model> models = {{"llama3 debugmodel (6.2M)", ""}};
  if (!o.quick) models.push_back({"llama3 110M (dim 1024, 8 layers)", "--model.hf_config " + mid_config.string()});
  const std::vector<LoraCase> cases = {
      {"full fine-tuning", ""},
      {"LoRA r8 q,k,v,o", "--lora.enable true --lora.rank 8 --lora.alpha 16 --lora.target_modules q,k,v,o"},
      {"LoRA r8 all linears",
       "--lora.enable true --lora.rank 8 --lora.alpha 16 --lora.target_modules q,k,v,o,gate,up,down"},
  };
  nlohmann::json results = nlohmann::json::array();
  std::printf("seq %lld x batch %lld, f32, %d steps after %d warm-up, %d rounds (medians); CPU: see the banner\n",
              static_cast<long long>(o.seq_len), static_cast<long long>(o.local_batch), o.steps, o.warmup, o.rounds);
  for (size_t mi = 0; mi < models.size(); ++mi) {
    const Model& model = models[mi];
    std::map<std::string, std::vector<RunResult>> runs;
    for (int round = 0; round < o.rounds; ++round) {
      for (size_t ci = 0; ci < cases.size(); ++ci) {
        runs[cases[ci].name].push_back(
            run_case(o, model, cases[ci], data, root / fmt::format("model{}_case{}", mi, ci)));
      }
    }
    std::printf("\n%s\n%-24s %10s %8s %13s %8s %20s %13s\n", model.name.c_str(), "case", "tokens/s", "vs full",
                "peak mem GiB", "vs full", "params+optimizer MB", "optimizer MB");
    double full_tps = 0, full_memory = 0;
    for (const LoraCase& c : cases) {
      std::vector<double> tps, memory;
      for (const RunResult& r : runs[c.name]) {
        tps.push_back(r.tokens_per_second);
        memory.push_back(r.peak_memory_gib);
      }
      const double tokens_per_second = median(tps), peak = median(memory);
      const int64_t state = runs[c.name].front().state_bytes;
      const int64_t optimizer = runs[c.name].front().optimizer_bytes;
      if (full_tps == 0) {
        full_tps = tokens_per_second;
        full_memory = peak;
      }
      std::printf("%-24s %10.0f %7.2fx %13.3f %7.2fx %20.1f %13.2f\n", c.name.c_str(), tokens_per_second,
                  tokens_per_second / full_tps, peak, peak / full_memory, static_cast<double>(state) / 1e6,
                  static_cast<double>(optimizer) / 1e6);
      results.push_back({{"model", model.name},
                         {"case", c.name},
                         {"tokens_per_second", tokens_per_second},
                         {"peak_memory_gib", peak},
                         {"parameter_and_optimizer_state_bytes", state},
                         {"optimizer_state_bytes", optimizer},
                         {"tokens_per_second_runs", tps}});
    }
  }
  write_json_report(o.json_path, {{"suite", "lora"}, {"cases", results}});
  return 0;
}

}  // namespace titan::bench
