// A job's model is built on the meta device, cut into this rank's shards and
// only then given storage and drawn from the seed by name. The tests play
// every rank of a job in turn (comm::FakeProcessGroup: the rank's real layout,
// no peers) and check that the shards, put back where their layouts say,
// are bitwise the model one process initialises, for FSDP, TP, PP, EP, CP and
// mixes of them; and that no rank ever allocates a whole sharded parameter
// (an AllocationCeiling below the smallest one turns any such allocation
// into an error).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
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

namespace titan::train {
namespace {

struct Layout {
  const char* name;
  int64_t pp = 1, dp_shard = 1, cp = 1, tp = 1, ep = 1;
  int world() const { return static_cast<int>(pp * dp_shard * cp * tp); }
};

JobConfig job_for(const std::string& family, const Layout& layout, int64_t vocab_size) {
  JobConfig config;
  config.model.name = family;
  config.model.flavor = "debugmodel";
  config.model.vocab_size = vocab_size;
  // What pipeline parallelism asks of these families: one stage pair per rank
  // when the output is tied to the embeddings, and no auxiliary MoE loss.
  if (family == "gemma2") config.parallelism.pipeline_parallel_schedule = "ZBVZeroBubble";
  if (family == "qwen3_moe") config.model.moe_aux_loss_coef = 0.0;
  config.training.seq_len = 64;
  config.training.local_batch_size = 8;
  config.training.seed = 11;
  config.training.memory_check = false;
  config.parallelism.pipeline_parallel_degree = layout.pp;
  config.parallelism.data_parallel_shard_degree = layout.dp_shard;
  config.parallelism.context_parallel_degree = layout.cp;
  config.parallelism.tensor_parallel_degree = layout.tp;
  config.parallelism.expert_parallel_degree = layout.ep;
  return config;
}

comm::ParallelDims dims_of(const Layout& layout) {
  return {layout.pp, 1, layout.dp_shard, layout.cp, layout.tp, layout.ep};
}

JobModel build_rank(const std::string& family, const Layout& layout, std::shared_ptr<comm::ProcessGroup> world,
                    int64_t vocab_size = 2048) {
  JobConfig config = job_for(family, layout, vocab_size);
  const comm::DeviceMesh mesh(dims_of(layout), std::move(world));
  Generator generator;
  return build_job_model(config, mesh, Device::cpu(), 0, generator);
}

// One process's model: every parameter whole.
std::map<std::string, Tensor> one_process_model(const std::string& family) {
  JobModel job = build_rank(family, Layout{"one process"}, std::make_shared<comm::LocalProcessGroup>());
  std::map<std::string, Tensor> whole;
  for (auto& [name, parameter] : job.model->named_parameters()) {
    EXPECT_FALSE(parameter->layout.sharded()) << name;
    whole.emplace(name, parameter->data.detach());
  }
  return whole;
}

// The element indices of `whole_shape` inside the box of `shape` at `offsets`, in the box's row-major order.
std::vector<int64_t> box_indices(const Shape& whole_shape, const Shape& shape, const Shape& offsets) {
  std::vector<int64_t> indices;
  const int64_t n = shape_numel(shape);
  indices.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, index = 0, stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      index += (rest % shape[d] + offsets[d]) * stride;
      rest /= shape[d];
      stride *= whole_shape[d];
    }
    indices.push_back(index);
  }
  return indices;
}

// Every rank's shards against the one-process model: each element bitwise
// equal, every element of every parameter held by some rank.
void expect_layout_matches_one_process(const std::string& family, const Layout& layout,
                                       const std::map<std::string, Tensor>& whole) {
  std::map<std::string, std::vector<char>> covered;
  std::map<std::string, std::vector<float>> values;
  for (const auto& [name, tensor] : whole) {
    covered[name].assign(static_cast<size_t>(tensor.numel()), 0);
    values[name] = tensor.to_floats();
  }
  for (int rank = 0; rank < layout.world(); ++rank) {
    JobModel job = build_rank(family, layout, std::make_shared<comm::FakeProcessGroup>(rank, layout.world()));
    for (auto& [name, parameter] : job.model->named_parameters()) {
      const auto found = whole.find(name);
      ASSERT_NE(found, whole.end()) << layout.name << " rank " << rank << ": " << name;
      const Tensor& full = found->second;
      const nn::ShardLayout& shard = parameter->layout;
      const Shape offsets = shard.sharded() ? shard.offsets : Shape(static_cast<size_t>(full.dim()), 0);
      if (shard.sharded()) {
        ASSERT_EQ(shard.global_shape, full.shape()) << name;
      }
      const std::vector<int64_t> indices = box_indices(full.shape(), parameter->data.shape(), offsets);
      const std::vector<float> mine = parameter->data.to_floats();
      const std::vector<float>& expected = values.at(name);
      std::vector<char>& held = covered.at(name);
      int64_t differing = 0;
      for (size_t i = 0; i < indices.size(); ++i) {
        const auto at = static_cast<size_t>(indices[i]);
        differing += std::memcmp(&mine[i], &expected[at], sizeof(float)) != 0;
        held[at] = 1;
      }
      EXPECT_EQ(differing, 0) << family << " " << layout.name << " rank " << rank << ": " << name << " shard "
                              << shape_str(parameter->data.shape()) << " at " << shape_str(offsets);
    }
  }
  for (const auto& [name, marks] : covered) {
    int64_t missing = 0;
    for (const char mark : marks) missing += mark == 0;
    EXPECT_EQ(missing, 0) << family << " " << layout.name << ": " << name << " has elements no rank holds";
  }
}

const std::vector<Layout>& dense_layouts() {
  static const std::vector<Layout> layouts{
      {"FSDP 2", 1, 2}, {"FSDP 4", 1, 4},  {"TP 2", 1, 1, 1, 2},
      {"PP 2", 2, 1},   {"CP 2", 1, 1, 2}, {"PP 2 x FSDP 2 x TP 2", 2, 2, 1, 2},
  };
  return layouts;
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

}  // namespace
}  // namespace titan::train
