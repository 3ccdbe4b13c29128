#include "cli_job.h"

#include <gtest/gtest.h>

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

std::vector<double> metrics_column(const fs::path& jsonl, const char* field) {
  std::vector<double> values;
  std::ifstream metrics(jsonl);
  for (std::string line; std::getline(metrics, line);) values.push_back(nlohmann::json::parse(line)[field]);
  return values;
}

std::map<std::string, Tensor> read_all_tensors(const fs::path& safetensors) {
  std::map<std::string, Tensor> tensors;
  if (!fs::exists(safetensors)) return tensors;
  checkpoint::SafetensorsReader reader(safetensors.string());
  for (const auto& entry : reader.header().entries) tensors[entry.name] = reader.read(entry.name);
  return tensors;
}

std::string mpirun(int ranks, const std::string& extra) {
  return fmt::format(
      "{} --allow-run-as-root --oversubscribe -np {} -x OMP_NUM_THREADS=1 -x OMPI_MCA_mpi_yield_when_idle=1 {}",
      TITAN_MPIEXEC, ranks, extra);
}

}  // namespace titan::testing
