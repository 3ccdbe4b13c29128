// LoRA fine-tuning of the llama3 debug model under parallelism: FSDP 2 and
// TP 2 (under mpirun, 2 ranks) must track the single-process run (losses and
// gradient norms within 1e-5 relative, same merged export), a mid-run
// checkpoint of the FSDP run resumed in one process must give the remaining
// steps exactly as the single run's, and the LoRA job holds far less optimizer
// state than full fine-tuning.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>

#include "parity_job.h"
#include "titan/checkpoint/safetensors.h"

namespace titan {
namespace lora_parity_test {

using testing::JobRun;

const testing::ParityJobs& jobs() {
  static const testing::ParityJobs instance("lora_parity");
  return instance;
}

const std::string kLora =
    "--lora.enable true --lora.rank 4 --lora.alpha 8 --lora.target_modules q,k,v,o,gate,up,down "
    "--checkpoint.export_dtype f32 " +
    testing::parity_checkpoint_flags();

TEST(LoraParity, FsdpAndTensorParallelMatchOneProcess) {
  const JobRun single = jobs().single("lora_single", kLora);
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(testing::kParitySteps));
  // Training moves the loss: the adapters really learn.
  EXPECT_LT(single.losses.back(), single.losses.front());

  const JobRun fsdp = jobs().distributed("lora_fsdp2", 2, 2, kLora + "--parallelism.data_parallel_shard_degree 2");
  testing::expect_matches(single, fsdp, "LoRA FSDP 2", true);
  const JobRun tp = jobs().distributed("lora_tp2", 2, 1, kLora + "--parallelism.tensor_parallel_degree 2");
  testing::expect_matches(single, tp, "LoRA TP 2", true);

  // FSDP 2's mid-run checkpoint (adapters and their AdamW moments, base weights) resumed by one process.
  testing::expect_resumes(single, jobs().resume("lora_fsdp2", "lora_resumed", 1, 1, kLora), "LoRA FSDP 2 resumed");

  // Every run wrote its PEFT adapter next to the merged export.
  const std::string final_step = fmt::format("step-{:06d}", testing::kParitySteps);
  for (const char* name : {"lora_single", "lora_fsdp2", "lora_tp2"}) {
    const std::filesystem::path adapter = jobs().dir() / name / "checkpoint" / final_step / "adapter";
    EXPECT_TRUE(std::filesystem::is_regular_file(adapter / "adapter_config.json")) << name;
    ASSERT_TRUE(std::filesystem::is_regular_file(adapter / "adapter_model.safetensors")) << name;
  }
  const checkpoint::SafetensorsReader single_adapter(
      (jobs().dir() / "lora_single/checkpoint" / final_step / "adapter/adapter_model.safetensors").string());
  const checkpoint::SafetensorsReader tp_adapter(
      (jobs().dir() / "lora_tp2/checkpoint" / final_step / "adapter/adapter_model.safetensors").string());
  for (const auto& entry : single_adapter.header().entries) {
    ASSERT_TRUE(tp_adapter.contains(entry.name)) << entry.name;
    const std::vector<float> a = single_adapter.read(entry.name).to_floats(),
                             b = tp_adapter.read(entry.name).to_floats();
    ASSERT_EQ(a.size(), b.size());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff += (a[i] - b[i]) * (a[i] - b[i]);
      norm += a[i] * a[i];
    }
    EXPECT_LE(std::sqrt(diff), 1e-4 * std::sqrt(norm) + 1e-9) << entry.name;
  }
}

TEST(LoraParity, OptimizerStateOnlyForAdapters) {
  const JobRun lora = jobs().single("lora_state", kLora);
  const JobRun full = jobs().single("full_state", testing::parity_checkpoint_flags());
  // Full fine-tuning: parameters + two moments. LoRA: parameters (+ small adapters) and the adapters' moments only.
  EXPECT_LE(static_cast<double>(lora.state_bytes), 0.40 * static_cast<double>(full.state_bytes));
  EXPECT_GE(static_cast<double>(lora.state_bytes), 0.30 * static_cast<double>(full.state_bytes));
}

}  // namespace lora_parity_test
}  // namespace titan
