#include "bench/context_parallel_bench.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench/json_report.h"
#include "bench/peer_process.h"
#include "bench/timing.h"
#include "bench/training_jobs.h"
#include "titan/models/memory_estimate.h"
#include "titan/models/model_spec.h"
#include "titan/train/config_loader.h"
#include "titan/train/job_model_config.h"

namespace titan::bench {
namespace {

namespace fs = std::filesystem;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

fs::path write_model_config(const fs::path& root, const ContextParallelBenchOptions& o) {
  const fs::path path = root / "config.json";
  std::ofstream(path) << fmt::format(
      R"({{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
  "intermediate_size": 768, "num_hidden_layers": {}, "num_attention_heads": 4, "num_key_value_heads": 2,
  "vocab_size": 2048, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "max_position_embeddings": {},
  "tie_word_embeddings": false}})",
      o.layers, o.seq_len);
  return path;
}

struct Job {
  std::string name, folder;
  int ranks = 1;
  std::string flags;  // context parallelism's, empty for one process
  std::string rotate_method = "allgather";
};

struct Row {
  std::string name;
  double step_seconds = 0, tokens_per_second = 0, step_memory_gib = 0, predicted_gib = 0;
  double attention_max_over_min = 0, wait_share = 0;
};

// What estimate-memory predicts a rank's step adds to what it starts with
// (weights and optimizer state): gradients, compute copies, activations, the
// loss and ring attention's buffers.
double predicted_step_gib(const ContextParallelBenchOptions& o, const fs::path& model, int cp,
                          const std::string& rotate_method) {
  train::JobConfig job;
  job.model.hf_config = model.string();
  const models::DecoderConfig config = train::resolve_model_config(job, 0);
  models::MemoryEstimateOptions options;
  options.batch = 1;
  options.seq_len = o.seq_len;
  options.compute_dtype = DType::bf16;
  options.cp = cp;
  options.cp_rotate_method = rotate_method;
  const models::MemoryEstimate e = models::estimate_memory(config, options);
  return (e.total() - e.parameter_bytes - e.optimizer_bytes) / kGiB;
}

Row measure(const ContextParallelBenchOptions& o, const Job& job, const fs::path& root, const fs::path& model,
            const fs::path& data) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = static_cast<int>(std::max(1u, cores / static_cast<unsigned>(job.ranks)));
  const fs::path folder = root / job.folder;
  // One sequence, no document masking: causal attention over every token.
  run_training_job(job.folder, job.ranks, threads, folder,
                   fmt::format("--config {} --model.hf_config {} --training.dataset_path {} --model.tokenizer_path "
                               "{}/tokenizer.json --training.steps {} --training.seq_len {} "
                               "--training.local_batch_size 1 --model.document_masking false --validation.enable "
                               "false --metrics.log_freq 1 --metrics.peak_tflops 1 --lr_scheduler.warmup_steps 1 {}",
                               shared_file("configs/llama3_debug.toml"), model.string(), data.string(), data.string(),
                               o.warmup + o.steps, o.seq_len, job.flags));
  Row row;
  row.name = job.name;
  std::vector<double> seconds, tps, memory, ratio, wait;
  for (const nlohmann::json& m : metrics_after(folder, o.warmup)) {
    seconds.push_back(m["step_seconds"]);
    // Per device: the context-parallel ranks share the sequence's tokens.
    tps.push_back(m["tokens_per_second"].get<double>() * job.ranks);
    if (!m.contains("context_parallel_rank_step_memory_gib")) {
      memory.push_back(m["step_memory_gib"]);
      continue;
    }
    const std::vector<double> steps = m["context_parallel_rank_step_memory_gib"];
    const std::vector<double> attention = m["context_parallel_rank_attention_seconds"];
    const std::vector<double> waits = m["context_parallel_rank_wait_seconds"];
    memory.push_back(*std::max_element(steps.begin(), steps.end()));
    ratio.push_back(*std::max_element(attention.begin(), attention.end()) /
                    *std::min_element(attention.begin(), attention.end()));
    wait.push_back(*std::max_element(waits.begin(), waits.end()) / m["step_seconds"].get<double>());
  }
  row.step_seconds = median(seconds);
  row.tokens_per_second = median(tps);
  row.step_memory_gib = median(memory);
  if (!ratio.empty()) {
    row.attention_max_over_min = median(ratio);
    row.wait_share = median(wait);
  }
  row.predicted_gib = predicted_step_gib(o, model, job.ranks, job.rotate_method);
  return row;
}

// estimate-memory's figure per GPU for one 1M-token sequence of Llama 3 8B.
nlohmann::json million_token_table() {
  const models::DecoderConfig config = models::model_config("llama3", "8B", 0);
  std::printf(
      "\nLlama 3 8B, one sequence of 1,048,576 tokens, bf16, full activation checkpointing, alltoall "
      "(titan estimate-memory --model llama3 --flavor 8B --seq-len 1048576 --activation-checkpoint full --cp N):\n");
  std::printf("%6s %14s %14s %14s %14s\n", "CP", "weights+opt", "activations", "ring buffers", "total GiB");
  nlohmann::json rows = nlohmann::json::array();
  for (int cp : {8, 16, 32}) {
    models::MemoryEstimateOptions options;
    options.seq_len = 1048576;
    options.activation_checkpoint = "full";
    options.cp = cp;
    options.cp_rotate_method = "alltoall";
    const models::MemoryEstimate e = models::estimate_memory(config, options);
    const double state = e.parameter_bytes + e.gradient_bytes + e.optimizer_bytes + e.compute_copy_bytes;
    std::printf("%6d %14.1f %14.1f %14.1f %14.1f\n", cp, state / kGiB, e.activation_bytes / kGiB,
                e.ring_attention_bytes / kGiB, e.total() / kGiB);
    rows.push_back({{"cp", cp}, {"total_gib", e.total() / kGiB}, {"activation_gib", e.activation_bytes / kGiB}});
  }
  return rows;
}

}  // namespace

int run_context_parallel_bench(const ContextParallelBenchOptions& o) {
  std::printf(
      "titan bench context-parallel: llama (dim 256, %d layer(s), 4 heads of 64, 2 KV heads), one sequence of %lld "
      "tokens, causal; median of %d steps after %d warm-up, %u cores%s\n"
      "step memory: the step's peak over what it began with (activations, gradients, ring buffers), the fullest "
      "rank; predicted: estimate-memory's\n\n",
      o.layers, static_cast<long long>(o.seq_len), o.steps, o.warmup, std::thread::hardware_concurrency(),
      std::thread::hardware_concurrency() < static_cast<unsigned>(o.ranks)
          ? " (more ranks than cores: ranks share cores, so step times compare total work, not speed-up)"
          : "");
  const fs::path root = fs::temp_directory_path() / "titan_bench_context_parallel";
  fs::create_directories(root);
  const fs::path model = write_model_config(root, o);
  const fs::path data = bench_corpus();
  const std::string cp = fmt::format("--parallelism.context_parallel_degree {} ", o.ranks);
  const std::vector<Job> jobs = {
      {"one process", "single", 1, "", "allgather"},
      {fmt::format("CP {} alltoall headtail", o.ranks), "alltoall_headtail", o.ranks,
       cp + "--parallelism.context_parallel_rotate_method alltoall", "alltoall"},
      {fmt::format("CP {} allgather headtail", o.ranks), "allgather_headtail", o.ranks, cp, "allgather"},
      {fmt::format("CP {} alltoall none", o.ranks), "alltoall_none", o.ranks,
       cp + "--parallelism.context_parallel_rotate_method alltoall --parallelism.context_parallel_load_balancer none",
       "alltoall"},
  };
  std::printf("%-26s %9s %10s %14s %14s %16s %8s\n", "job", "step s", "tokens/s", "step mem GiB", "predicted GiB",
              "attention max/min", "kv wait");
  nlohmann::json results = nlohmann::json::array();
  double single_memory = 0, balanced_memory = 0;
  for (const Job& job : jobs) {
    const Row r = measure(o, job, root, model, data);
    std::printf("%-26s %9.2f %10.0f %14.3f %14.3f %16s %8s\n", r.name.c_str(), r.step_seconds, r.tokens_per_second,
                r.step_memory_gib, r.predicted_gib,
                job.ranks > 1 ? fmt::format("{:.3f}", r.attention_max_over_min).c_str() : "-",
                job.ranks > 1 ? fmt::format("{:.1f}%", 100.0 * r.wait_share).c_str() : "-");
    std::fflush(stdout);
    if (job.ranks == 1) single_memory = r.step_memory_gib;
    if (&job == &jobs[1]) balanced_memory = r.step_memory_gib;
    results.push_back({{"job", r.name},
                       {"step_seconds", r.step_seconds},
                       {"tokens_per_second", r.tokens_per_second},
                       {"step_memory_gib", r.step_memory_gib},
                       {"predicted_step_memory_gib", r.predicted_gib},
                       {"attention_max_over_min", r.attention_max_over_min},
                       {"kv_wait_share", r.wait_share}});
  }
  std::printf("\nCP %d's step memory per rank is %.2f of one process's (target <= 0.33: %s)\n", o.ranks,
              balanced_memory / single_memory, balanced_memory <= single_memory / 3.0 ? "met" : "missed");
  const nlohmann::json million = million_token_table();
  write_json_report(o.json_path,
                    {{"ranks", o.ranks}, {"seq_len", o.seq_len}, {"jobs", results}, {"llama3_8b_1m_tokens", million}});
  return 0;
}

}  // namespace titan::bench
