// Playing every rank of a parallel job in one process, for the tests of how a
// job's model comes to each rank's shards (initial values, loaded weights):
// comm::FakeProcessGroup gives a rank its real layout with no peers, and the
// shards, put back where their nn::ShardLayouts say, are compared with one
// process's whole model.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/comm/process_group.h"
#include "titan/train/job_model.h"

namespace titan::train::testing {

struct Layout {
  const char* name;
  int64_t pp = 1, dp_shard = 1, cp = 1, tp = 1, ep = 1;
  int world() const { return static_cast<int>(pp * dp_shard * cp * tp); }
};

// The FSDP, TP, PP, CP layouts and a 3-D mix every family is checked under.
const std::vector<Layout>& dense_layouts();

// A debugmodel job of `family` under `layout` (seed 11, seq 64, no memory check).
JobConfig job_for(const std::string& family, const Layout& layout, int64_t vocab_size = 2048);

// One rank's model of `config` under `layout`, on the CPU.
JobModel build_rank(JobConfig config, const Layout& layout, std::shared_ptr<comm::ProcessGroup> world);

// Every parameter of a one-process model (each whole), by name.
std::map<std::string, Tensor> whole_parameters(JobModel& job);

// Builds rank r's model of a layout.
using RankBuilder = std::function<JobModel(int rank)>;

// Every rank's shards against `whole`: each element bitwise equal, every
// element of every parameter held by some rank. `what` names the case in
// failures.
void expect_shards_match(const std::string& what, const Layout& layout, const std::map<std::string, Tensor>& whole,
                         const RankBuilder& build);

}  // namespace titan::train::testing
