// Weights named by checkpoint.initial_load_path (a Hugging Face folder, a
// titan model export) are read straight into each rank's shards: a rank reads
// only its shards' bytes, and never holds a whole sharded parameter. The tests
// play every rank of a job in turn (train/sharded_layouts.h) and check that
// the shards are bitwise what one process loads, that each rank read exactly
// its shards' bytes (counted by the safetensors reader), and that an
// allocation ceiling below any whole matrix is never hit while loading.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/peer_support.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/comm/fake_process_group.h"
#include "titan/comm/local_process_group.h"
#include "titan/core/allocation_ceiling.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/train/model_export.h"
#include "train/sharded_layouts.h"

namespace titan::train {
namespace sharded_load_test {

using data::testing::TempDir;
using testing::build_rank;
using testing::job_for;
using testing::Layout;

// The weights a job loads: drawn with seed 11; the loading jobs use seed 12,
// so a parameter left as initialised would differ from the loaded one.
constexpr int64_t kLoadingSeed = 12;

checkpoint::NamedTensors state_of(JobModel& job) {
  checkpoint::NamedTensors tensors;
  for (auto& [name, parameter] : job.model->named_parameters()) tensors.emplace_back(name, parameter->data);
  for (auto& [name, buffer] : job.model->named_persistent_buffers()) tensors.emplace_back(name, *buffer);
  return tensors;
}

// An HF folder of `family`'s debug model in bf16, split over several
// safetensors files; returns the model it holds (f32, as one process built it).
JobModel write_hf_model(const std::string& family, const std::string& folder, int64_t vocab_size = 2048) {
  JobModel source = build_rank(job_for(family, Layout{"one process"}, vocab_size), Layout{"one process"},
                               std::make_shared<comm::LocalProcessGroup>());
  models::write_hf_folder(folder, family, source.model->config, state_of(source),
                          {DType::bf16, uint64_t{256} << 10, {}});
  return source;
}

JobConfig loading_job(const std::string& family, const Layout& layout, const std::string& folder,
                      int64_t vocab_size = 2048) {
  JobConfig config = job_for(family, layout, vocab_size);
  config.training.seed = kLoadingSeed;
  config.checkpoint.initial_load_path = folder;
  return config;
}

// Bytes a rank's model should have read: its parameters' stored elements (and
// `with_buffers`: its persistent buffers') at `file_element_bytes` each.
uint64_t share_bytes(JobModel& job, uint64_t file_element_bytes, bool with_buffers) {
  uint64_t bytes = 0;
  for (auto& [name, parameter] : job.model->named_parameters()) {
    const bool adapter = name.ends_with("lora_A.weight") || name.ends_with("lora_B.weight");  // not in the file
    if (!adapter) bytes += static_cast<uint64_t>(parameter->data.numel()) * file_element_bytes;
  }
  if (with_buffers) {
    for (auto& [name, buffer] : job.model->named_persistent_buffers()) bytes += buffer->nbytes();
  }
  return bytes;
}

// Each rank of `layout` loading `config`'s weights: bitwise what one process
// loads (`whole`), having read exactly its share of the files.
void expect_loaded_shards(const std::string& what, const Layout& layout, const JobConfig& config,
                          const std::map<std::string, Tensor>& whole, uint64_t file_element_bytes,
                          bool buffers_in_file) {
  testing::expect_shards_match(what, layout, whole, [&](int rank) {
    const uint64_t before = checkpoint::safetensors_bytes_read();
    JobModel job = build_rank(config, layout, std::make_shared<comm::FakeProcessGroup>(rank, layout.world()));
    const uint64_t read = checkpoint::safetensors_bytes_read() - before;
    EXPECT_EQ(read, share_bytes(job, file_element_bytes, buffers_in_file))
        << what << " " << layout.name << " rank " << rank << ": bytes read against its shards' bytes";
    return job;
  });
}

std::map<std::string, Tensor> one_process_load(JobConfig config) {
  for (int64_t* degree : {&config.parallelism.pipeline_parallel_degree, &config.parallelism.data_parallel_shard_degree,
                          &config.parallelism.context_parallel_degree, &config.parallelism.tensor_parallel_degree,
                          &config.parallelism.expert_parallel_degree}) {
    *degree = 1;
  }
  JobModel job = build_rank(config, Layout{"one process"}, std::make_shared<comm::LocalProcessGroup>());
  return testing::whole_parameters(job);
}

// One process loads the folder's values (the source model rounded to bf16),
// not its own initial draw.
void expect_loaded_from(JobModel& source, const std::map<std::string, Tensor>& loaded) {
  for (auto& [name, parameter] : source.model->named_parameters()) {
    EXPECT_EQ(loaded.at(name).to_floats(), parameter->data.to(DType::bf16).to(DType::f32).to_floats()) << name;
  }
}

std::vector<Layout> hf_layouts() {
  return {{"FSDP 2", 1, 2}, {"TP 2", 1, 1, 1, 2}, {"FSDP 4 x TP 2", 1, 4, 1, 2}, {"PP 2 x FSDP 2 x TP 2", 2, 2, 1, 2}};
}

// Llama 3's q/k rows are stored permuted in HF folders: a rank reads its
// rows one by one from where HF keeps them.
TEST(ShardedLoad, Llama3HfFolderIntoShardsIsTheOneProcessLoad) {
  TempDir dir;
  const std::string folder = (dir / "hf").string();
  JobModel source = write_hf_model("llama3", folder);
  ASSERT_GT(models::HfFolderReader(folder).tensor_names().size(), 1u);
  const std::map<std::string, Tensor> whole = one_process_load(loading_job("llama3", Layout{"one process"}, folder));
  expect_loaded_from(source, whole);
  for (const Layout& layout : hf_layouts()) {
    expect_loaded_shards("llama3 HF", layout, loading_job("llama3", layout, folder), whole, 2, false);
  }
}

// Gemma 2 ties the output to the embeddings; Qwen3-MoE's experts are one HF
// tensor each, and expert parallelism reads only this rank's experts.
TEST(ShardedLoad, Gemma2AndQwen3MoeHfFoldersIntoShardsAreTheOneProcessLoad) {
  TempDir dir;
  for (const std::string family : {"gemma2", "qwen3_moe"}) {
    const std::string folder = (dir / family).string();
    JobModel source = write_hf_model(family, folder);
    const std::map<std::string, Tensor> whole = one_process_load(loading_job(family, Layout{"one process"}, folder));
    expect_loaded_from(source, whole);
    std::vector<Layout> layouts = hf_layouts();
    if (family == "qwen3_moe") {
      layouts.push_back({"FSDP 4 with EP 2", 1, 4, 1, 1, 2});
      layouts.push_back({"PP 2 x FSDP 2 x TP 2 with EP 2", 2, 2, 1, 2, 2});
    }
    for (const Layout& layout : layouts) {
      expect_loaded_shards(family + " HF", layout, loading_job(family, layout, folder), whole, 2, false);
    }
  }
}

// LoRA on a sharded HF base: the base weights are loaded into shards, the
// adapters keep their draw by name.
TEST(ShardedLoad, LoraOnAnHfBaseInShardsIsTheOneProcessJob) {
  TempDir dir;
  const std::string folder = (dir / "hf").string();
  write_hf_model("llama3", folder);
  auto lora_job = [&](const Layout& layout) {
    JobConfig config = loading_job("llama3", layout, folder);
    config.lora.enable = true;
    config.lora.rank = 4;
    return config;
  };
  const std::map<std::string, Tensor> whole = one_process_load(lora_job(Layout{"one process"}));
  const Layout layout{"FSDP 2 x TP 2", 1, 2, 1, 2};
  expect_loaded_shards("llama3 LoRA on HF", layout, lora_job(layout), whole, 2, false);
}

// A titan export (f32, titan names and layout): each rank reads its boxes.
TEST(ShardedLoad, ModelExportIntoShardsIsTheExportedModel) {
  TempDir dir;
  const std::string folder = (dir / "export").string();
  JobModel source = build_rank(job_for("qwen3_moe", Layout{"one process"}), Layout{"one process"},
                               std::make_shared<comm::LocalProcessGroup>());
  export_model(*source.model, job_for("qwen3_moe", Layout{"one process"}), folder, DType::f32);
  const std::map<std::string, Tensor> exported = testing::whole_parameters(source);
  for (const Layout& layout : {Layout{"FSDP 2 x TP 2", 1, 2, 1, 2}, Layout{"PP 2 x FSDP 2 with EP 2", 2, 2, 1, 1, 2}}) {
    expect_loaded_shards("qwen3_moe export", layout, loading_job("qwen3_moe", layout, folder), exported, 4, true);
  }
}

// Under FSDP 4 with a vocabulary of 256 every shard is smaller than any whole
// matrix: a ceiling just below the smallest whole matrix is never hit while a
// rank loads the folder, so no whole tensor is staged.
TEST(ShardedLoad, NoRankAllocatesAWholeMatrixWhileLoading) {
  constexpr int64_t kVocab = 256;
  TempDir dir;
  const std::string folder = (dir / "hf").string();
  JobModel source = write_hf_model("llama3", folder, kVocab);
  size_t smallest_whole = SIZE_MAX;
  for (auto& [name, parameter] : source.model->named_parameters()) {
    if (parameter->data.dim() == 2) smallest_whole = std::min(smallest_whole, parameter->data.nbytes());
  }
  const Layout layout{"FSDP 4", 1, 4};
  for (int rank = 0; rank < layout.world(); ++rank) {
    const AllocationCeiling guard(DeviceType::cpu, smallest_whole - 1);
    EXPECT_NO_THROW(build_rank(loading_job("llama3", layout, folder, kVocab), layout,
                               std::make_shared<comm::FakeProcessGroup>(rank, layout.world())))
        << "rank " << rank;
  }
}

}  // namespace sharded_load_test
}  // namespace titan::train
