// Helpers shared by the integration tests that run the `titan` CLI (alone or
// under mpirun) as real processes and read back what the jobs wrote.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::testing {

// Runs a shell command with stdout and stderr in `log`; returns the exit
// status and puts the output in `output`.
int run_command(const std::string& command, const std::filesystem::path& log, std::string* output = nullptr);
// Starts a shell command in the background (output in `log`); returns its pid.
pid_t start_command(const std::string& command, const std::filesystem::path& log);
// Waits for a command start_command started; returns its wait status.
int wait_command(pid_t pid);
// A finished command: its wait status and output.
struct CommandResult {
  int status = 0;
  std::string output;
};
// Runs a command to completion (output also kept in `log`).
CommandResult run_to_completion(const std::string& command, const std::filesystem::path& log);
// Exit 1 (a user error, never "internal error") with every fragment in the output.
void expect_user_error(const CommandResult& result, std::initializer_list<std::string> fragments);
// The running test's own folder under TempDir()/`file` (Suite.Test, '/' of a
// parameterised name as '_'): CTest may run a file's tests at once.
std::filesystem::path per_test_folder(const std::string& file);
// A file's whole content ("" when it cannot be read).
std::string file_text(const std::filesystem::path& path);
// Runs a command that must succeed (a GoogleTest failure shows its output otherwise); returns its output.
std::string run_ok(const std::string& command, const std::filesystem::path& log);
// `titan data prepare` of two small fortune files with a 512-token BPE into `folder` (once).
void prepare_test_corpus(const std::filesystem::path& folder, const std::filesystem::path& log);
// A two-layer Llama (dim 256, vocab 512) whose steps take milliseconds and
// whose checkpoints a few MB: config.json written into `folder` once; its path.
std::filesystem::path write_tiny_llama_config(const std::filesystem::path& folder);
// A two-layer Qwen3-MoE (every layer MoE: `experts` experts of `expert_hidden`,
// `top_k` per token; 4 heads): config.json written into `folder`; its path.
struct TinyMoe {
  int64_t dim = 256, expert_hidden = 128, experts = 8, top_k = 2, vocab = 512;
};
std::filesystem::path write_tiny_moe_config(const std::filesystem::path& folder, const TinyMoe& moe);
// A two-layer gpt-oss (GptOssForCausalLM: layer 0 slides over 16 tokens,
// layer 1 is full; dim 64, 4 query / 2 key-value heads of 16 with sinks, q/k/v
// and output biases, 4 experts of 64 with biases, 2 per token, the router's
// bias; YaRN as published; vocab 512): config.json written into `folder`; its path.
std::filesystem::path write_tiny_gpt_oss_config(const std::filesystem::path& folder);
// `titan train` (CLI path included) of that model on the corpus prepare_test_corpus
// wrote into `data`, seq 128 x batch 4, dumping into `dump`; `extra` goes last.
std::string tiny_train_command(const std::filesystem::path& data, const std::filesystem::path& config_json,
                               const std::filesystem::path& dump, const std::string& extra = "");
// One field of every step record of a metrics.jsonl.
std::vector<double> metrics_column(const std::filesystem::path& jsonl, const char* field);
// Every tensor of a safetensors file (empty when there is none).
std::map<std::string, Tensor> read_all_tensors(const std::filesystem::path& safetensors);
// `mpirun -np N` with the options every test launch needs.
std::string mpirun(int ranks, const std::string& extra = "");

}  // namespace titan::testing
