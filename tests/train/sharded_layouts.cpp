#include "train/sharded_layouts.h"

#include <gtest/gtest.h>

#include <cstring>

#include "titan/comm/device_mesh.h"

namespace titan::train::testing {

namespace {

comm::ParallelDims dims_of(const Layout& layout) {
  return {layout.pp, 1, layout.dp_shard, layout.cp, layout.tp, layout.ep};
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

}  // namespace

const std::vector<Layout>& dense_layouts() {
  static const std::vector<Layout> layouts{
      {"FSDP 2", 1, 2}, {"FSDP 4", 1, 4},  {"TP 2", 1, 1, 1, 2},
      {"PP 2", 2, 1},   {"CP 2", 1, 1, 2}, {"PP 2 x FSDP 2 x TP 2", 2, 2, 1, 2},
  };
  return layouts;
}

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

JobModel build_rank(JobConfig config, const Layout& layout, std::shared_ptr<comm::ProcessGroup> world) {
  const comm::DeviceMesh mesh(dims_of(layout), std::move(world));
  Generator generator;
  return build_job_model(config, mesh, Device::cpu(), 0, generator);
}

std::map<std::string, Tensor> whole_parameters(JobModel& job) {
  std::map<std::string, Tensor> whole;
  for (auto& [name, parameter] : job.model->named_parameters()) {
    EXPECT_FALSE(parameter->layout.sharded()) << name;
    whole.emplace(name, parameter->data.detach());
  }
  return whole;
}

void expect_shards_match(const std::string& what, const Layout& layout, const std::map<std::string, Tensor>& whole,
                         const RankBuilder& build) {
  std::map<std::string, std::vector<char>> covered;
  std::map<std::string, std::vector<float>> values;
  for (const auto& [name, tensor] : whole) {
    covered[name].assign(static_cast<size_t>(tensor.numel()), 0);
    values[name] = tensor.to_floats();
  }
  for (int rank = 0; rank < layout.world(); ++rank) {
    JobModel job = build(rank);
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
      EXPECT_EQ(differing, 0) << what << " " << layout.name << " rank " << rank << ": " << name << " shard "
                              << shape_str(parameter->data.shape()) << " at " << shape_str(offsets);
    }
  }
  for (const auto& [name, marks] : covered) {
    int64_t missing = 0;
    for (const char mark : marks) missing += mark == 0;
    EXPECT_EQ(missing, 0) << what << " " << layout.name << ": " << name << " has elements no rank holds";
  }
}

}  // namespace titan::train::testing
