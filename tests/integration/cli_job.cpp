#include "cli_job.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "titan/checkpoint/safetensors.h"

namespace titan::testing {

namespace fs = std::filesystem;

int run_command(const std::string& command, const fs::path& log, std::string* output) {
  const int status = std::system((command + " > " + log.string() + " 2>&1").c_str());
  std::ifstream file(log);
  std::stringstream text;
  text << file.rdbuf();
  if (output != nullptr) *output = text.str();
  return status;
}

CommandResult run_to_completion(const std::string& command, const fs::path& log) {
  CommandResult result;
  result.status = run_command(command, log, &result.output);
  return result;
}

void expect_user_error(const CommandResult& result, std::initializer_list<std::string> fragments) {
  EXPECT_TRUE(WIFEXITED(result.status) && WEXITSTATUS(result.status) == 1) << result.output;
  EXPECT_EQ(result.output.find("internal error"), std::string::npos) << result.output;
  for (const std::string& fragment : fragments) {
    EXPECT_NE(result.output.find(fragment), std::string::npos) << "'" << fragment << "' not in:\n" << result.output;
  }
}

pid_t start_command(const std::string& command, const fs::path& log) {
  const pid_t child = fork();
  if (child == 0) {
    const std::string line = "exec " + command + " > '" + log.string() + "' 2>&1";
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return child;
}

int wait_command(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

std::string file_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string run_ok(const std::string& command, const fs::path& log) {
  std::string output;
  const int status = run_command(command, log, &output);
  EXPECT_EQ(status, 0) << command << "\n" << output;
  return output;
}

void prepare_test_corpus(const fs::path& folder, const fs::path& log) {
  if (fs::exists(folder / "manifest.json")) return;
  run_ok(fmt::format("{} data prepare --input /usr/share/games/fortunes/computers /usr/share/games/fortunes/science "
                     "--format fortune --train-tokenizer 512 --output {}",
                     TITAN_CLI_PATH, folder.string()),
         log);
}

fs::path write_tiny_llama_config(const fs::path& folder) {
  const fs::path path = folder / "config.json";
  fs::create_directories(folder);
  std::ofstream(path) << R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 768,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 256, "tie_word_embeddings": false})";
  return path;
}

fs::path write_tiny_moe_config(const fs::path& folder, const TinyMoe& moe) {
  const fs::path path = folder / "config.json";
  fs::create_directories(folder);
  std::ofstream(path) << fmt::format(
      R"({{
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": {}, "intermediate_size": {},
  "moe_intermediate_size": {}, "num_experts": {}, "num_experts_per_tok": {}, "decoder_sparse_step": 1,
  "mlp_only_layers": [], "norm_topk_prob": true, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": {}, "vocab_size": {}, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
  "max_position_embeddings": 256, "tie_word_embeddings": false}})",
      moe.dim, 3 * moe.dim, moe.expert_hidden, moe.experts, moe.top_k, moe.dim / 4, moe.vocab);
  return path;
}

fs::path write_tiny_gpt_oss_config(const fs::path& folder) {
  const fs::path path = folder / "config.json";
  fs::create_directories(folder);
  std::ofstream(path) << R"({
  "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": true, "head_dim": 16,
  "hidden_size": 64, "intermediate_size": 64, "max_position_embeddings": 256, "num_attention_heads": 4,
  "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_key_value_heads": 2, "num_local_experts": 4,
  "output_router_logits": false, "rms_norm_eps": 1e-05, "sliding_window": 16, "swiglu_limit": 7.0,
  "layer_types": ["sliding_attention", "full_attention"], "tie_word_embeddings": false, "vocab_size": 512,
  "rope_theta": 150000, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
  "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false}})";
  return path;
}

std::string tiny_train_command(const fs::path& data, const fs::path& config_json, const fs::path& dump,
                               const std::string& extra) {
  return fmt::format(
      "{} train --config {}/configs/llama3_debug.toml --model.hf_config {} --job.dump_folder {} "
      "--training.dataset_path {} --model.tokenizer_path {}/tokenizer.json --training.seq_len 128 "
      "--training.local_batch_size 4 --lr_scheduler.warmup_steps 2 --metrics.peak_tflops 1 --metrics.progress false "
      "{}",
      TITAN_CLI_PATH, TITAN_SOURCE_DIR, config_json.string(), dump.string(), data.string(), data.string(), extra);
}

std::vector<double> metrics_column(const fs::path& jsonl, const char* field) {
  std::vector<double> values;
  std::ifstream metrics(jsonl);
  for (std::string line; std::getline(metrics, line);) {
    // Step records only: the job's closing goodput record has no step.
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("step")) values.push_back(record[field]);
  }
  return values;
}

std::map<std::string, Tensor> read_all_tensors(const fs::path& safetensors) {
  std::map<std::string, Tensor> tensors;
  if (!fs::exists(safetensors)) return tensors;
  checkpoint::SafetensorsReader reader(safetensors.string());
  for (const auto& entry : reader.header().entries) tensors[entry.name] = reader.read(entry.name);
  return tensors;
}

fs::path per_test_folder(const std::string& file) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(test->test_suite_name()) + "." + test->name();
  std::replace(name.begin(), name.end(), '/', '_');
  return fs::path(::testing::TempDir()) / file / name;
}

std::string mpirun(int ranks, const std::string& extra) {
  return fmt::format(
      "{} --allow-run-as-root --oversubscribe -np {} -x OMP_NUM_THREADS=1 -x OMPI_MCA_mpi_yield_when_idle=1 {}",
      TITAN_MPIEXEC, ranks, extra);
}

}  // namespace titan::testing
