// Helpers shared by the integration tests that run the `titan` CLI (alone or
// under mpirun) as real processes and read back what the jobs wrote.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::testing {

// Runs a shell command with stdout and stderr in `log`; returns the exit
// status and puts the output in `output`.
int run_command(const std::string& command, const std::filesystem::path& log, std::string* output = nullptr);
// Runs a command that must succeed (a GoogleTest failure shows its output otherwise); returns its output.
std::string run_ok(const std::string& command, const std::filesystem::path& log);
// `titan data prepare` of two small fortune files with a 512-token BPE into `folder` (once).
void prepare_test_corpus(const std::filesystem::path& folder, const std::filesystem::path& log);
// One field of every record of a metrics.jsonl.
std::vector<double> metrics_column(const std::filesystem::path& jsonl, const char* field);
// Every tensor of a safetensors file (empty when there is none).
std::map<std::string, Tensor> read_all_tensors(const std::filesystem::path& safetensors);
// `mpirun -np N` with the options every test launch needs.
std::string mpirun(int ranks, const std::string& extra = "");

}  // namespace titan::testing
