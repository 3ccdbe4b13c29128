// The FLUX trainer (train/flux) on a tiny transformer (a Diffusers
// config.json) and a fixed set of encoded examples: validation loss at fixed
// timesteps falls as it learns them; switches that must not change the maths
// (activation checkpointing, resuming from a checkpoint) do not; bf16 mixed
// precision tracks f32; caption dropout at probability 1 removes what the
// captions say; a prepared dataset reads back bit for bit and a damaged one is
// refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "titan/checkpoint/safetensors.h"
#include "titan/core/error.h"
#include "titan/models/flux/flux_diffusers_config.h"
#include "titan/ops/random.h"
#include "titan/train/flux/flux_dataset.h"
#include "titan/train/flux/flux_trainer.h"

namespace titan {
namespace flux_trainer_test {

namespace fs = std::filesystem;
using train::flux::FluxData;
using train::flux::FluxDataset;
using train::flux::FluxExamples;
using train::flux::FluxTrainer;

// Latents of 4 channels at 4x4 (4 packed tokens of 16 features), T5 states 6 x 8, CLIP 12.
constexpr int64_t kChannels = 4, kSide = 4, kTextTokens = 6, kTextWidth = 8, kClipWidth = 12;

std::string tiny_transformer_config(const std::string& folder) {
  models::flux::FluxConfig config;
  config.in_channels = config.out_channels = 4 * kChannels;
  config.hidden_size = 32;
  config.num_heads = 2;
  config.axes_dim = {4, 6, 6};
  config.depth = 1;
  config.depth_single_blocks = 1;
  config.context_in_dim = kTextWidth;
  config.vec_in_dim = kClipWidth;
  fs::create_directories(folder);
  const std::string path = folder + "/transformer_config.json";
  std::ofstream(path) << models::flux::diffusers_flux_config_json(config);
  return path;
}

Tensor normal(const Shape& shape, uint64_t seed) {
  Generator generator(seed);
  const Tensor t = Tensor::empty(shape);
  ops::normal_(t, 0.0, 1.0, generator);
  return t;
}

// `n` examples drawn from `seed`: the latents differ, and so do their captions' encodings.
FluxExamples examples(int64_t n, uint64_t seed) {
  FluxExamples out{normal({n, kChannels, kSide, kSide}, seed),
                   normal({n, kTextTokens, kTextWidth}, seed + 1),
                   normal({n, kClipWidth}, seed + 2),
                   {}};
  for (int64_t i = 0; i < n; ++i) out.captions.push_back("example " + std::to_string(i));
  return out;
}

FluxDataset dataset(uint64_t seed = 1) {
  FluxDataset d;
  d.img_size = 8 * kSide;
  d.encoders_fingerprint = "test";
  d.train = examples(8, seed);
  d.validation = d.train;  // learning the training set is what these tests measure
  d.empty_t5 = Tensor::zeros({kTextTokens, kTextWidth});
  d.empty_clip = Tensor::zeros({kClipWidth});
  return d;
}

train::JobConfig small_job(const std::string& name) {
  train::JobConfig config;
  config.job.dump_folder = ::testing::TempDir() + "/flux_trainer_" + name;
  fs::remove_all(config.job.dump_folder);
  config.model.name = "flux";
  config.model.hf_config = tiny_transformer_config(config.job.dump_folder + "_model");
  config.training.img_size = 8 * kSide;
  config.training.local_batch_size = 4;
  config.training.steps = 4;
  config.training.max_norm = 1.0;
  config.lr_scheduler.warmup_steps = 1;
  config.optimizer.lr = 3e-3;
  config.metrics.peak_tflops = 1.0;
  config.metrics.progress = false;
  config.validation.steps = 2;
  return config;
}

train::flux::FluxDataFactory data_of(const FluxDataset& d, const train::JobConfig& config) {
  return [d, config](const comm::DeviceMesh& mesh) { return train::flux::flux_data(d, config, mesh); };
}

std::vector<double> losses_of(FluxTrainer& trainer) {
  std::vector<double> losses;
  for (const auto& m : trainer.train()) losses.push_back(m.loss);
  return losses;
}

TEST(FluxTrainer, ValidationLossFallsAsItLearnsTheExamples) {
  train::JobConfig config = small_job("learns");
  config.training.steps = 80;
  config.optimizer.lr = 1e-2;
  config.lr_scheduler.warmup_steps = 5;
  FluxTrainer trainer(config, data_of(dataset(), config));
  const double before = trainer.validate();
  // The output layer starts at zero: the velocity predicted is 0, and the loss
  // is E|noise - x0|^2 = 2 for unit-variance latents and noise.
  EXPECT_NEAR(before, 2.0, 0.5);
  trainer.train();
  const double after = trainer.validate();
  EXPECT_LT(after, 0.75 * before) << "before " << before << ", after " << after;
  std::printf("flux learning: validation loss %.4f before, %.4f after\n", before, after);
}

TEST(FluxTrainer, ActivationCheckpointingChangesNothing) {
  train::JobConfig plain = small_job("ac_none");
  train::JobConfig checkpointed = small_job("ac_full");
  checkpointed.activation_checkpoint.mode = "full";
  FluxTrainer a(plain, data_of(dataset(), plain));
  FluxTrainer b(checkpointed, data_of(dataset(), checkpointed));
  const std::vector<double> la = losses_of(a), lb = losses_of(b);
  ASSERT_EQ(la.size(), 4u);
  // The recomputation runs the same kernels on the same inputs.
  for (size_t i = 0; i < la.size(); ++i) EXPECT_EQ(la[i], lb[i]) << "step " << i + 1;
}

TEST(FluxTrainer, ResumingFromACheckpointContinuesTheSameRun) {
  train::JobConfig straight = small_job("resume_straight");
  FluxTrainer whole(straight, data_of(dataset(), straight));
  const std::vector<double> expected = losses_of(whole);

  train::JobConfig interrupted = small_job("resume_parts");
  interrupted.checkpoint.enable = true;
  interrupted.checkpoint.interval = 2;
  interrupted.training.steps = 2;
  {
    FluxTrainer first(interrupted, data_of(dataset(), interrupted));
    first.train();
  }
  interrupted.training.steps = 4;
  FluxTrainer second(interrupted, data_of(dataset(), interrupted));
  EXPECT_EQ(second.step(), 2);
  const std::vector<double> rest = losses_of(second);
  ASSERT_EQ(rest.size(), 2u);
  // Weights, moments, the data position and the random stream all come back: the same numbers.
  EXPECT_EQ(rest[0], expected[2]);
  EXPECT_EQ(rest[1], expected[3]);
}

TEST(FluxTrainer, Bf16MixedPrecisionTracksF32) {
  train::JobConfig f32 = small_job("f32");
  train::JobConfig bf16 = small_job("bf16");
  bf16.training.mixed_precision_param = "bf16";
  FluxTrainer a(f32, data_of(dataset(), f32));
  FluxTrainer b(bf16, data_of(dataset(), bf16));
  const std::vector<double> la = losses_of(a), lb = losses_of(b);
  // bf16 keeps 8 bits of mantissa: a few parts in a thousand per op, well under 3% on a loss near 2.
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 0.03 * la[i]) << "step " << i + 1;
}

TEST(FluxTrainer, CaptionDropoutAtOneRemovesTheCaptions) {
  // Two datasets with the same latents and different captions' encodings.
  FluxDataset first = dataset(), second = dataset();
  second.train.t5 = normal(first.train.t5.shape(), 77);
  second.train.clip = normal(first.train.clip.shape(), 78);
  const auto run = [](const std::string& name, const FluxDataset& d, double p) {
    train::JobConfig config = small_job(name);
    config.training.classifier_free_guidance_prob = p;
    FluxTrainer trainer(config, data_of(d, config));
    return losses_of(trainer);
  };
  // Every caption replaced by the empty prompt's encodings: the captions no longer matter.
  EXPECT_EQ(run("drop_all_a", first, 1.0), run("drop_all_b", second, 1.0));
  // Kept, they do.
  EXPECT_NE(run("drop_none_a", first, 0.0), run("drop_none_b", second, 0.0));
}

// Building a trainer for `config` must fail with an error naming `key`.
void expect_refused_naming(const train::JobConfig& config, const std::string& key) {
  try {
    FluxTrainer trainer(config, data_of(dataset(), config));
    ADD_FAILURE() << key << ": accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(key), std::string::npos) << error.what();
  }
}

TEST(FluxTrainer, BadKeysAreRefusedByName) {
  train::JobConfig config = small_job("bad_keys");
  config.training.timestep_sampling = "cosine";
  expect_refused_naming(config, "training.timestep_sampling");
  config = small_job("bad_size");
  config.training.img_size = 64;  // the dataset was prepared at 32
  expect_refused_naming(config, "training.img_size");
  config = small_job("bad_parallelism");
  config.parallelism.tensor_parallel_degree = 2;
  expect_refused_naming(config, "tensor_parallel_degree");
}

TEST(FluxDataset, WritesAndReadsBackBitForBit) {
  const std::string folder = ::testing::TempDir() + "/flux_dataset_roundtrip";
  fs::remove_all(folder);
  const FluxDataset written = dataset();
  train::flux::write_flux_dataset(folder, written, /*shard_examples=*/3);  // 3 + 3 + 2
  ASSERT_TRUE(train::flux::is_flux_dataset(folder));
  EXPECT_TRUE(fs::exists(folder + "/train-00002.safetensors"));
  const FluxDataset read = train::flux::read_flux_dataset(folder);
  EXPECT_EQ(read.img_size, written.img_size);
  EXPECT_EQ(read.encoders_fingerprint, "test");
  EXPECT_EQ(read.train.captions, written.train.captions);
  EXPECT_EQ(read.train.latents.to_floats(), written.train.latents.to_floats());
  EXPECT_EQ(read.train.t5.to_floats(), written.train.t5.to_floats());
  EXPECT_EQ(read.train.clip.to_floats(), written.train.clip.to_floats());
  EXPECT_EQ(read.validation.clip.to_floats(), written.validation.clip.to_floats());
  EXPECT_EQ(read.empty_t5.to_floats(), written.empty_t5.to_floats());
}

// `damage` applied to a fresh prepared folder must make reading it fail with `expected` in the message.
void expect_refused(const std::string& name, const std::function<void(const std::string&)>& damage,
                    const std::string& expected) {
  const std::string folder = ::testing::TempDir() + "/flux_dataset_" + name;
  fs::remove_all(folder);
  train::flux::write_flux_dataset(folder, dataset(), 4);
  damage(folder);
  try {
    train::flux::read_flux_dataset(folder);
    ADD_FAILURE() << name << ": read without error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << name << ": " << error.what();
  }
}

TEST(FluxDataset, DamagedFoldersAreRefusedByName) {
  expect_refused(
      "missing_shard", [](const std::string& f) { fs::remove(f + "/train-00001.safetensors"); },
      "train-00001.safetensors");
  expect_refused(
      "wrong_shape",
      [](const std::string& f) {
        checkpoint::write_safetensors(f + "/train-00000.safetensors",
                                      {{"latents", Tensor::zeros({4, kChannels, kSide, 2})},
                                       {"t5", Tensor::zeros({4, kTextTokens, kTextWidth})},
                                       {"clip", Tensor::zeros({4, kClipWidth})}},
                                      {{"captions", "[\"a\",\"b\",\"c\",\"d\"]"}});
      },
      "'latents'");
  expect_refused(
      "not_json", [](const std::string& f) { std::ofstream(f + "/manifest.json") << "{ nope"; }, "manifest.json");
  expect_refused(
      "other_format",
      [](const std::string& f) { std::ofstream(f + "/manifest.json") << R"({"format": "titan-tokens"})"; },
      "not a prepared FLUX dataset");
}

}  // namespace flux_trainer_test
}  // namespace titan
