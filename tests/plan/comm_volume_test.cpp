// The cost model's communication per step against what titan issues: the
// same layout's job run on the rehearsal backend (comm.mode = fake_backend)
// counts every collective its rank calls, by mesh group and operation, with
// their sizes. The model's calls and bytes per kind must match that ledger,
// so a wrong assumption about titan's FSDP units, resharding, tensor- or
// context-parallel collectives or expert all-to-alls shows up here.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <string>

#include "titan/plan/cost_model.h"

namespace titan::plan {
namespace comm_volume_test {

namespace fs = std::filesystem;

struct LedgerEntry {
  double calls = 0.0, mib = 0.0;
};

std::string run_command(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  std::string output;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe.get()) != nullptr) output += buffer.data();
  const int status = pclose(pipe.release());
  EXPECT_EQ(status, 0) << output;
  return output;
}

// The main job's corpus (embedded fortunes, 2048-token BPE), prepared once
// under the temp folder: a clean clone has no data/fortunes until `make run`.
const fs::path& test_corpus() {
  static const fs::path folder = [] {
    const fs::path path = fs::temp_directory_path() / "titan_plan_comm_corpus";
    if (!fs::exists(path / "manifest.json")) {
      run_command(std::string("'") + TITAN_CLI_PATH + "' data prepare --train-tokenizer 2048 --output '" +
                  path.string() + "' 2>&1");
    }
    return path;
  }();
  return folder;
}

// "group operation" -> calls and MiB, from the rehearsal report's table.
std::map<std::string, LedgerEntry> rehearsal_ledger(const Layout& layout, const PlanRequest& request,
                                                    const std::string& name) {
  const fs::path folder = fs::temp_directory_path() / ("titan_plan_comm_" + name);
  fs::remove_all(folder);
  fs::create_directories(folder);
  std::ofstream(folder / "job.toml") << layout_job_toml(layout, request);
  const std::string output =
      run_command(std::string("cd '") + TITAN_SOURCE_DIR + "' && '" + TITAN_CLI_PATH + "' train --config '" +
                  (folder / "job.toml").string() + "' --comm.mode fake_backend --comm.fake_world_size " +
                  std::to_string(layout.devices()) +
                  " --comm.fake_rank 0 --training.steps 1 --validation.enable false" + " --training.dataset_path '" +
                  test_corpus().string() + "' --model.tokenizer_path '" + (test_corpus() / "tokenizer.json").string() +
                  "'" + " --job.dump_folder '" + (folder / "dump").string() + "' 2>&1");
  std::map<std::string, LedgerEntry> ledger;
  const std::regex row(R"(titan:\s+(\S+)\s+(\S+)\s+([0-9.]+) calls\s+([0-9.]+) MiB)");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), row); it != std::sregex_iterator(); ++it) {
    ledger[(*it)[1].str() + " " + (*it)[2].str()] = {std::stod((*it)[3].str()), std::stod((*it)[4].str())};
  }
  EXPECT_FALSE(ledger.empty()) << output;
  fs::remove_all(folder);
  return ledger;
}

LedgerEntry predicted(const StepPrediction& prediction, const std::string& kind) {
  LedgerEntry total;
  for (const CommCost& cost : prediction.comm) {
    if (cost.kind != kind) continue;
    total.calls += static_cast<double>(cost.calls);
    total.mib += cost.bytes / (1024.0 * 1024.0);
  }
  return total;
}

// The ledger rows of several group/operation pairs together.
LedgerEntry measured(const std::map<std::string, LedgerEntry>& ledger, std::initializer_list<std::string> rows) {
  LedgerEntry total;
  for (const std::string& row : rows) {
    const auto found = ledger.find(row);
    if (found == ledger.end()) continue;
    total.calls += found->second.calls;
    total.mib += found->second.mib;
  }
  return total;
}

// Calls within one of titan's (a unit split in two buckets), bytes within 10%.
void expect_close(const LedgerEntry& model, const LedgerEntry& titan, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_GT(titan.calls, 0.0);
  EXPECT_NEAR(model.calls, titan.calls, 1.0);
  EXPECT_NEAR(model.mib, titan.mib, 0.1 * titan.mib + 0.01);
}

PlanRequest debug_request(const std::string& model, const std::string& flavor) {
  PlanRequest request;
  request.model = model;
  request.flavor = flavor;
  request.vocab_size = 2048;  // data/fortunes' tokenizer
  request.seq_len = 128;
  request.devices = 4;
  request.devices_per_node = 4;
  return request;
}

DeviceProfile any_device() { return published_device_profile("h100"); }

TEST(CommVolume, FsdpAndTensorParallelMatchTheRehearsalLedger) {
  const PlanRequest request = debug_request("llama3", "debugmodel");
  Layout layout;
  layout.dp_shard = 2;
  layout.tp = 2;
  layout.local_batch_size = 4;
  const StepPrediction prediction = predict_step(model_under_plan(request), request, layout, any_device());
  const auto ledger = rehearsal_ledger(layout, request, "fsdp_tp");
  expect_close(predicted(prediction, "fsdp_all_gather"), measured(ledger, {"dp_shard_cp all_gather"}), "all-gather");
  expect_close(predicted(prediction, "fsdp_reduce_scatter"), measured(ledger, {"dp_shard_cp reduce_scatter"}),
               "reduce-scatter");
  expect_close(predicted(prediction, "tp"), measured(ledger, {"tp all_gather", "tp reduce_scatter"}), "tp");
}

TEST(CommVolume, HsdpAndContextParallelMatchTheRehearsalLedger) {
  const PlanRequest request = debug_request("llama3", "debugmodel");
  Layout layout;
  layout.dp_replicate = 2;
  layout.cp = 2;
  layout.local_batch_size = 2;
  const StepPrediction prediction = predict_step(model_under_plan(request), request, layout, any_device());
  const auto ledger = rehearsal_ledger(layout, request, "hsdp_cp");
  expect_close(predicted(prediction, "fsdp_all_gather"), measured(ledger, {"dp_shard_cp all_gather"}), "all-gather");
  expect_close(predicted(prediction, "dp_all_reduce"), measured(ledger, {"dp_replicate all_reduce"}), "replicas");
  expect_close(predicted(prediction, "cp_reduce_scatter"), measured(ledger, {"cp reduce_scatter"}), "cp gradients");
  // The keys' and values' gathers; titan's ledger also holds a few calls of a
  // few bytes each (the sequence's positions), which the model leaves out.
  const LedgerEntry gathers = measured(ledger, {"cp all_gather"});
  EXPECT_NEAR(predicted(prediction, "cp_all_gather").mib, gathers.mib, 0.1 * gathers.mib);
}

TEST(CommVolume, ExpertParallelAllToAllMatchesTheRehearsalLedger) {
  const PlanRequest request = debug_request("qwen3_moe", "debugmodel");
  Layout layout;
  layout.dp_shard = 4;
  layout.ep = 2;
  layout.local_batch_size = 2;
  const StepPrediction prediction = predict_step(model_under_plan(request), request, layout, any_device());
  const auto ledger = rehearsal_ledger(layout, request, "ep");
  expect_close(predicted(prediction, "ep_all_to_all"), measured(ledger, {"ep all_to_all"}), "ep");
  // The experts are gathered and reduced over their own group, beside the dense parameters.
  LedgerEntry gathers = measured(ledger, {"dp_shard_cp all_gather", "dp_shard_mod_ep_cp all_gather"});
  EXPECT_NEAR(predicted(prediction, "fsdp_all_gather").mib, gathers.mib, 0.1 * gathers.mib);
  LedgerEntry reductions = measured(ledger, {"dp_shard_cp reduce_scatter", "dp_shard_mod_ep_cp reduce_scatter"});
  EXPECT_NEAR(predicted(prediction, "fsdp_reduce_scatter").mib, reductions.mib, 0.1 * reductions.mib);
}

}  // namespace comm_volume_test
}  // namespace titan::plan
