// A job's model is built on the meta device, cut into this rank's shards and
// only then given storage and drawn from the seed by name. The tests play
// every rank of a job in turn (train/sharded_layouts.h) and check that the
// shards are bitwise the model one process initialises, for FSDP, TP, PP, EP,
// CP and mixes of them; and that no rank ever allocates a whole sharded
// parameter (an AllocationCeiling below the smallest one turns any such
// allocation into an error).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "titan/comm/device_mesh.h"
#include "titan/comm/fake_process_group.h"
#include "titan/comm/local_process_group.h"
#include "titan/core/allocation_ceiling.h"
#include "titan/models/model_spec.h"
#include "titan/nn/initialize.h"
#include "titan/train/job_model.h"
#include "train/sharded_layouts.h"

namespace titan::train {
namespace sharded_init_test {

using testing::build_rank;
using testing::dense_layouts;
using testing::job_for;
using testing::Layout;

JobModel build_rank(const std::string& family, const Layout& layout, std::shared_ptr<comm::ProcessGroup> world,
                    int64_t vocab_size = 2048) {
  return build_rank(job_for(family, layout, vocab_size), layout, std::move(world));
}

// One process's model: every parameter whole.
std::map<std::string, Tensor> one_process_model(const std::string& family) {
  JobModel job = build_rank(family, Layout{"one process"}, std::make_shared<comm::LocalProcessGroup>());
  return testing::whole_parameters(job);
}

void expect_layout_matches_one_process(const std::string& family, const Layout& layout,
                                       const std::map<std::string, Tensor>& whole) {
  testing::expect_shards_match(family, layout, whole, [&](int rank) {
    return build_rank(family, layout, std::make_shared<comm::FakeProcessGroup>(rank, layout.world()));
  });
}

TEST(ShardedInit, Llama3ShardsUnderEveryLayoutAreTheOneProcessModel) {
  const std::map<std::string, Tensor> whole = one_process_model("llama3");
  for (const Layout& layout : dense_layouts()) expect_layout_matches_one_process("llama3", layout, whole);
}

TEST(ShardedInit, Gemma2ShardsUnderEveryLayoutAreTheOneProcessModel) {
  const std::map<std::string, Tensor> whole = one_process_model("gemma2");
  for (const Layout& layout : dense_layouts()) expect_layout_matches_one_process("gemma2", layout, whole);
}

TEST(ShardedInit, Qwen3MoeShardsUnderEveryLayoutAreTheOneProcessModel) {
  const std::map<std::string, Tensor> whole = one_process_model("qwen3_moe");
  std::vector<Layout> layouts = dense_layouts();
  layouts.push_back({"EP 2 (of FSDP 2)", 1, 2, 1, 1, 2});
  layouts.push_back({"FSDP 4 with EP 2", 1, 4, 1, 1, 2});
  layouts.push_back({"PP 2 x FSDP 2 x TP 2 with EP 2", 2, 2, 1, 2, 2});
  for (const Layout& layout : layouts) expect_layout_matches_one_process("qwen3_moe", layout, whole);
}

// The values depend on the seed and the name, not on the order modules were
// built in: two parameters of the same shape and rule draw different numbers,
// and a parameter's numbers follow it when the seed is the same.
TEST(ShardedInit, ValuesFollowTheNameAndTheSeed) {
  const std::map<std::string, Tensor> whole = one_process_model("llama3");
  EXPECT_NE(whole.at("layers.1.attention.wq.weight").to_floats(), whole.at("layers.2.attention.wq.weight").to_floats());
  EXPECT_NE(nn::parameter_stream("layers.1.attention.wq.weight"), nn::parameter_stream("layers.2.attention.wq.weight"));
  EXPECT_EQ(one_process_model("llama3").at("layers.1.attention.wq.weight").to_floats(),
            whole.at("layers.1.attention.wq.weight").to_floats());
}

// Under FSDP 4 no rank allocates as much as the smallest whole matrix it
// shards (with a vocabulary of 256 every shard is smaller than that); building
// the whole model under the same ceiling fails, so the ceiling does catch
// whole parameters.
TEST(ShardedInit, NoRankAllocatesAWholeShardedParameter) {
  const Layout layout{"FSDP 4", 1, 4};
  constexpr int64_t kVocab = 256;
  size_t smallest_whole = SIZE_MAX, largest_shard = 0;
  {
    JobModel probe = build_rank("llama3", layout, std::make_shared<comm::FakeProcessGroup>(0, 4), kVocab);
    for (auto& [name, parameter] : probe.model->named_parameters()) {
      ASSERT_TRUE(parameter->layout.sharded()) << name;
      largest_shard = std::max(largest_shard, parameter->data.nbytes());
      // Norm weights are smaller than the RoPE table: the matrices are what a whole copy would cost.
      const size_t whole_bytes = static_cast<size_t>(shape_numel(parameter->layout.global_shape)) * sizeof(float);
      if (parameter->data.dim() == 2) smallest_whole = std::min(smallest_whole, whole_bytes);
    }
  }
  ASSERT_LT(largest_shard, smallest_whole);
  const size_t ceiling = smallest_whole - 1;
  for (int rank = 0; rank < 4; ++rank) {
    const AllocationCeiling guard(DeviceType::cpu, ceiling);
    EXPECT_NO_THROW(build_rank("llama3", layout, std::make_shared<comm::FakeProcessGroup>(rank, 4), kVocab)) << rank;
  }
  const AllocationCeiling guard(DeviceType::cpu, ceiling);
  const models::DecoderConfig config = models::model_spec("llama3").config("debugmodel", kVocab);
  EXPECT_THROW(models::model_spec("llama3").build(config, Device::cpu()), Error);
}

}  // namespace sharded_init_test
}  // namespace titan::train
