// The trainer end to end on small jobs: the loss falls on real text, and the
// switches that must not change the maths (gradient accumulation, activation
// checkpointing, a second run with the same seed) do not; bf16 mixed
// precision stays close to f32; bad data is a clear error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "titan/autograd/grad_mode.h"
#include "titan/data/data_prepare.h"
#include "titan/ops/random.h"
#include "titan/train/model_export.h"
#include "titan/train/random_batches.h"
#include "titan/train/trainer.h"
#include "train/batch_split.h"

namespace titan {
namespace trainer_test {

namespace fs = std::filesystem;

// A small job: llama3 debugmodel on short sequences, no GEMM-peak measurement.
train::JobConfig small_job(const std::string& name) {
  train::JobConfig config;
  config.job.dump_folder = ::testing::TempDir() + "/trainer_" + name;
  config.training.seq_len = 64;
  config.training.local_batch_size = 4;
  config.training.steps = 4;
  config.lr_scheduler.warmup_steps = 2;
  config.optimizer.lr = 2e-3;
  config.metrics.peak_tflops = 1.0;
  config.metrics.progress = false;
  config.model.vocab_size = 300;
  return config;
}

// Random batches from a fixed seed: `rows` sequences per call.
train::BatchSource random_batches(int64_t rows, int64_t seq, uint64_t seed) {
  return train::random_token_batches(rows, seq, 300, seed);
}

std::vector<double> losses_of(train::Trainer& trainer) {
  std::vector<double> losses;
  for (const auto& m : trainer.train()) losses.push_back(m.loss);
  return losses;
}

TEST(Trainer, GradientAccumulationMatchesOneLargeBatch) {
  train::JobConfig whole = small_job("accumulate_whole");
  whole.training.local_batch_size = 8;
  train::Trainer one(whole, random_batches(8, 64, 5));
  train::JobConfig parts = small_job("accumulate_parts");
  parts.training.local_batch_size = 4;
  parts.training.global_batch_size = 8;
  train::Trainer two(parts, train::testing::split_batches(random_batches(8, 64, 5), 2));
  EXPECT_EQ(two.gradient_accumulation_steps(), 2);
  const std::vector<double> a = losses_of(one), b = losses_of(two);
  // Same data, same maths; only the summation order of the two halves differs (f32 rounding).
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * a[i]) << "step " << i + 1;
}

TEST(Trainer, ActivationCheckpointingChangesNothing) {
  std::vector<std::vector<double>> runs;
  std::vector<std::vector<float>> weights;
  for (const std::string mode : {"none", "full", "selective", "selective_ops"}) {
    train::JobConfig config = small_job("ac_" + mode);
    config.activation_checkpoint.mode = mode == "selective_ops" ? "selective" : mode;
    // TorchTitan's per-op policy: every other matmul's output and attention's kept, the rest recomputed.
    config.activation_checkpoint.selective_ops = mode == "selective_ops";
    train::Trainer trainer(config, random_batches(4, 64, 6));
    runs.push_back(losses_of(trainer));
    weights.push_back(trainer.model().layers->operator[](3)->feed_forward->w2->weight->data.to_floats());
  }
  // The recompute runs the same kernels in the same order: bitwise identical.
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0], runs[2]);
  EXPECT_EQ(runs[0], runs[3]);
  EXPECT_EQ(weights[0], weights[1]);
  EXPECT_EQ(weights[0], weights[2]);
  EXPECT_EQ(weights[0], weights[3]);
}

// The per-op policy on a mixture of experts: the router's gate is always
// recomputed (per_op_sac_force_recompute_mm_shapes_by_fqns), the run is the same.
TEST(Trainer, SelectiveOpsOnMixtureOfExpertsChangesNothing) {
  std::vector<std::vector<double>> runs;
  for (const bool ops : {false, true}) {
    train::JobConfig config = small_job(ops ? "moe_ops" : "moe_plain");
    config.model.name = "qwen3_moe";
    config.training.steps = 2;
    config.activation_checkpoint.mode = ops ? "selective" : "none";
    config.activation_checkpoint.selective_ops = ops;
    train::Trainer trainer(config, random_batches(4, 64, 7));
    runs.push_back(losses_of(trainer));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

// Offload moves the saved activations' bytes out and back; the backward runs
// the same kernels on the same values, so the run is bitwise the same, and
// the peak of live device (here: allocator) memory falls.
TEST(Trainer, ActivationOffloadChangesNothingAndLowersPeakMemory) {
  std::vector<std::vector<double>> losses;
  std::vector<std::vector<float>> weights;
  std::vector<double> peaks;
  for (const char* mode : {"none", "offload"}) {
    train::JobConfig config = small_job(std::string("offload_") + mode);
    config.activation_checkpoint.mode = mode;
    // Enough tokens that activations, not weights and moments, set the peak.
    config.training.seq_len = 128;
    config.training.local_batch_size = 8;
    config.training.steps = 3;
    train::Trainer trainer(config, random_batches(8, 128, 6));
    std::vector<double> run;
    double peak = 0.0;
    for (int64_t step = 0; step < config.training.steps; ++step) {
      const train::StepMetrics m = trainer.train_step();
      run.push_back(m.loss);
      peak = std::max(peak, m.peak_memory_gib);
    }
    losses.push_back(run);
    peaks.push_back(peak);
    weights.push_back(trainer.model().layers->operator[](3)->feed_forward->w2->weight->data.to_floats());
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(weights[0], weights[1]);
  std::printf("peak live memory: %.4f GiB without offload, %.4f GiB with\n", peaks[0], peaks[1]);
  // Measured 0.167 vs 0.113 GiB; weights, gradients and moments (0.06 GiB) stay either way.
  EXPECT_LT(peaks[1], 0.8 * peaks[0]) << "offload did not lower the peak";
}

TEST(Trainer, SameSeedSameRunBitwise) {
  train::Trainer a(small_job("seed_a"), random_batches(4, 64, 7));
  train::Trainer b(small_job("seed_b"), random_batches(4, 64, 7));
  EXPECT_EQ(losses_of(a), losses_of(b));
}

TEST(Trainer, Bf16MixedPrecisionTracksF32) {
  train::JobConfig f32 = small_job("mp_f32");
  train::JobConfig bf16 = small_job("mp_bf16");
  bf16.training.mixed_precision_param = "bf16";
  train::Trainer a(f32, random_batches(4, 64, 8)), b(bf16, random_batches(4, 64, 8));
  const std::vector<double> la = losses_of(a), lb = losses_of(b);
  // bf16 activations carry ~0.4% relative rounding; the loss (an average over 256 tokens) far less.
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 0.01 * la[i]) << "step " << i + 1;
  for (auto& [name, parameter] : b.model().named_parameters()) {
    EXPECT_EQ(parameter->data.dtype(), DType::f32) << name;  // master weights stay f32
  }
}

// Real text: a few of the fortune files, a tokenizer trained on them, 40 steps.
TEST(Trainer, LossFallsOnTextAndExportReloads) {
  const fs::path folder = fs::path(::testing::TempDir()) / "trainer_text_data";
  data::PrepareOptions prepare;
  prepare.inputs = {std::string(data::kDefaultCorpusDir) + "/computers",
                    std::string(data::kDefaultCorpusDir) + "/science"};
  prepare.corpus.format = "fortune";
  prepare.train_vocab_size = 512;
  prepare.output = folder.string();
  data::prepare_dataset(prepare);

  train::JobConfig config = small_job("text");
  config.model.vocab_size = 0;  // from the tokenizer
  config.model.tokenizer_path = (folder / "tokenizer.json").string();
  config.model.document_masking = true;
  config.training.dataset_path = folder.string();
  config.training.steps = 40;
  config.lr_scheduler.warmup_steps = 5;
  config.validation.enable = true;
  config.validation.freq = 40;
  config.validation.steps = 2;
  config.validation.split = 0.05;
  config.checkpoint.enable = true;  // saves only at the last step (interval 500): the model export
  train::Trainer trainer(config);
  const std::vector<train::StepMetrics> history = trainer.train();
  ASSERT_EQ(history.size(), 40u);
  EXPECT_LT(history.back().loss, history.front().loss - 1.0);
  ASSERT_TRUE(history.back().validation_loss.has_value());
  EXPECT_LT(*history.back().validation_loss, history.front().loss - 1.0);

  // metrics.jsonl: one record per step with the documented fields, then the job's goodput.
  std::ifstream metrics(fs::path(config.job.dump_folder) / "metrics.jsonl");
  std::string line, last;
  int lines = 0;
  while (std::getline(metrics, line)) {
    if (line.find("\"goodput\"") != std::string::npos) continue;
    ++lines;
    last = line;
  }
  EXPECT_GE(lines, 40);
  for (const char* field : {"\"loss\"", "\"grad_norm\"", "\"lr\"", "\"tokens_per_second\"", "\"tflops\"",
                            "\"mfu_percent\"", "\"peak_memory_gib\"", "\"data_percent\"", "\"validation_loss\""}) {
    EXPECT_NE(last.find(field), std::string::npos) << field;
  }

  // The final export reloads into the same model.
  const fs::path exported = fs::path(config.job.dump_folder) / "checkpoint" / "step-000040";
  train::ExportedModel reloaded = train::load_exported_model(exported.string());
  autograd::NoGradGuard no_grad;
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5}, {1, 5});
  EXPECT_EQ(reloaded.model->logits({ids, {}, {}}).to_floats(), trainer.model().logits({ids, {}, {}}).to_floats());
  EXPECT_THROW(train::load_exported_model((fs::path(config.job.dump_folder) / "nothing").string()), Error);
}

TEST(Trainer, MissingOrEmptyDataIsAClearError) {
  train::JobConfig config = small_job("missing");
  config.training.dataset_path = "/nonexistent/dataset";
  config.model.tokenizer_path = "cl100k_base";
  try {
    train::Trainer trainer(config);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/dataset"), std::string::npos) << error.what();
  }
  const fs::path empty = fs::path(::testing::TempDir()) / "trainer_empty.txt";
  std::ofstream(empty) << "";
  config.training.dataset_path = empty.string();
  EXPECT_THROW(train::Trainer trainer(config), Error);
}

}  // namespace trainer_test
}  // namespace titan
