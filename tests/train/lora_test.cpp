// LoRA fine-tuning (models/lora_plan.h) against independent references: 10
// f32 AdamW steps of the llama3 debug model with adapters on every projection
// kind against plain PyTorch (tests/reference/lora_reference.py), the frozen
// base untouched and without gradients or optimizer state, dropout seeded and
// reproducible, the merged export equal to W + (alpha / r) B A computed here
// in double and giving the LoRA model's logits, the PEFT folder read back, and
// configuration errors naming their key or target.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/reference.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/hf/hf_weights.h"
#include "titan/models/lora_plan.h"
#include "titan/models/model_spec.h"
#include "titan/train/config_loader.h"
#include "titan/train/model_export.h"
#include "titan/train/trainer.h"

namespace titan {
namespace lora_test {

namespace fs = std::filesystem;
using testing::ReferenceCase;

const std::vector<std::string> kAllTargets{"q", "k", "v", "o", "gate", "up", "down"};

train::JobConfig lora_config(const ReferenceCase& ref, const std::string& name) {
  train::JobConfig config;
  config.model.name = "llama3";
  config.model.flavor = "debugmodel";
  config.model.vocab_size = ref.meta_int("vocab");
  config.optimizer.lr = ref.meta_double("lr");
  config.optimizer.beta1 = 0.9;
  config.optimizer.beta2 = 0.95;
  config.optimizer.eps = 1e-8;
  config.optimizer.weight_decay = ref.meta_double("weight_decay");
  config.optimizer.no_weight_decay = {"norm", "tok_embeddings"};
  config.lr_scheduler.warmup_steps = ref.meta_int("warmup");
  config.training.steps = ref.meta_int("steps");
  config.training.max_norm = ref.meta_double("max_norm");
  config.training.local_batch_size = ref.get("input_ids.1").size(0);
  config.training.seq_len = ref.get("input_ids.1").size(1);
  config.training.mixed_precision_param = "f32";
  config.metrics.peak_tflops = 1.0;  // skip the GEMM peak measurement
  config.checkpoint.export_dtype = "f32";
  config.job.dump_folder = ::testing::TempDir() + "/lora_" + name;
  fs::remove_all(config.job.dump_folder);
  config.lora.enable = true;
  config.lora.rank = ref.meta_int("rank");
  config.lora.alpha = ref.meta_double("alpha");
  config.lora.target_modules = kAllTargets;
  return config;
}

// A trainer fed the reference batches (by step, so a resumed trainer gets the right ones), with its initial weights.
struct ReferenceTrainer {
  ReferenceTrainer(const ReferenceCase& ref, const train::JobConfig& config) {
    trainer = std::make_unique<train::Trainer>(config, [this, &ref] {
      const int64_t step = trainer->step();
      data::Batch batch;
      batch.input_ids = ref.get(fmt::format("input_ids.{}", step));
      batch.labels = ref.get(fmt::format("labels.{}", step));
      return batch;
    });
    std::map<std::string, Tensor> initial;
    for (auto& [name, parameter] : trainer->model().named_parameters()) initial[name] = ref.get("init." + name);
    trainer->model().load_state_dict(initial);
  }
  std::unique_ptr<train::Trainer> trainer;
};

bool is_adapter(const std::string& name) { return name.find(".lora_") != std::string::npos; }

TEST(Lora, TracksPlainPyTorchReference) {
  ReferenceCase ref("lora_llama3_debug");
  ReferenceTrainer run(ref, lora_config(ref, "parity"));
  train::Trainer& trainer = *run.trainer;
  std::map<std::string, Tensor> base_before;
  int64_t adapter_bytes = 0, adapters = 0;
  for (auto& [name, parameter] : trainer.model().named_parameters()) {
    if (is_adapter(name)) {
      EXPECT_TRUE(parameter->data.requires_grad()) << name;
      adapter_bytes += static_cast<int64_t>(parameter->data.nbytes());
      ++adapters;
    } else {
      EXPECT_FALSE(parameter->data.requires_grad()) << name;
      base_before[name] = parameter->data.clone();
    }
  }
  // 6 layers x 7 projections x (A, B).
  EXPECT_EQ(adapters, 6 * 7 * 2);
  const std::vector<float> losses = ref.get("losses").to_floats(), norms = ref.get("grad_norms").to_floats();
  for (int64_t step = 1; step <= ref.meta_int("steps"); ++step) {
    const train::StepMetrics m = trainer.train_step();
    const double loss = losses[static_cast<size_t>(step - 1)], norm = norms[static_cast<size_t>(step - 1)];
    EXPECT_NEAR(m.loss, loss, 1e-5 * loss) << "step " << step;
    EXPECT_NEAR(m.grad_norm, norm, 1e-5 * norm) << "step " << step;
    // The frozen base gets no gradient tensor at all.
    for (auto& [name, parameter] : trainer.model().named_parameters()) {
      if (!is_adapter(name)) {
        EXPECT_FALSE(parameter->data.grad().defined()) << name << " at step " << step;
      }
    }
  }
  EXPECT_LT(losses.back(), losses.front());
  for (auto& [name, parameter] : trainer.model().named_parameters()) {
    if (is_adapter(name)) {
      // Adam divides each element's step by its own gradient scale, so an element
      // whose gradient is near zero turns f32 rounding into a visibly different
      // step: compared as a whole tensor (1e-5 relative L2 and a few) and elementwise
      // with an absolute floor far under the steps' size (lr = 3e-3): 1e-4, a
      // thirtieth of one step (one element of 1,024 ended 3e-5 off on a Zen 5
      // EPYC, whose GEMMs sum in another order than Zen 4's).
      const Tensor expected = ref.get("final." + name);
      EXPECT_LE(testing::relative_l2_error(parameter->data, expected), 3e-5) << name;
      EXPECT_TRUE(testing::all_close(parameter->data, expected, 1e-4, 1e-5)) << name;
    } else {
      // Bit for bit.
      const Tensor& before = base_before.at(name);
      ASSERT_EQ(parameter->data.nbytes(), before.nbytes());
      EXPECT_EQ(std::memcmp(parameter->data.data_ptr(), before.data_ptr(), before.nbytes()), 0) << name;
    }
  }
  // AdamW state: two f32 moments per adapter element, nothing for the base.
  int64_t moment_bytes = 0;
  for (const auto& [name, moment] : trainer.optimizer().state_tensors()) {
    EXPECT_TRUE(is_adapter(name)) << name;
    moment_bytes += static_cast<int64_t>(moment.nbytes());
  }
  EXPECT_EQ(moment_bytes, 2 * adapter_bytes);
}

TEST(Lora, ResumeIsExact) {
  ReferenceCase ref("lora_llama3_debug");
  train::JobConfig config = lora_config(ref, "resume_full");
  config.checkpoint.enable = true;
  config.checkpoint.interval = 5;
  ReferenceTrainer straight(ref, config);
  const std::vector<train::StepMetrics> all = straight.trainer->train();
  ASSERT_EQ(all.size(), 10u);

  train::JobConfig resumed_config = lora_config(ref, "resume_half");
  resumed_config.checkpoint.enable = true;
  resumed_config.checkpoint.interval = 5;
  fs::create_directories(fs::path(resumed_config.job.dump_folder) / "checkpoint");
  fs::copy(fs::path(config.job.dump_folder) / "checkpoint" / "step-000005",
           fs::path(resumed_config.job.dump_folder) / "checkpoint" / "step-000005", fs::copy_options::recursive);
  train::Trainer resumed(resumed_config, [&] {
    data::Batch batch;
    batch.input_ids = ref.get(fmt::format("input_ids.{}", resumed.step()));
    batch.labels = ref.get(fmt::format("labels.{}", resumed.step()));
    return batch;
  });
  ASSERT_EQ(resumed.step(), 5);
  const std::vector<train::StepMetrics> rest = resumed.train();
  ASSERT_EQ(rest.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(rest[i].loss, all[i + 5].loss) << "step " << i + 6;
    EXPECT_EQ(rest[i].grad_norm, all[i + 5].grad_norm) << "step " << i + 6;
  }
  const std::map<std::string, Tensor> expected = straight.trainer->model().state_dict();
  for (const auto& [name, tensor] : resumed.model().state_dict()) {
    EXPECT_EQ(std::memcmp(tensor.data_ptr(), expected.at(name).data_ptr(), tensor.nbytes()), 0) << name;
  }
}

TEST(Lora, DropoutIsSeededAndChangesTheResult) {
  ReferenceCase ref("lora_llama3_debug");
  auto losses = [&](double dropout, int64_t seed, const std::string& name) {
    train::JobConfig config = lora_config(ref, name);
    config.training.steps = 4;
    config.lora.dropout = dropout;
    config.training.seed = seed;
    ReferenceTrainer run(ref, config);
    std::vector<double> result;
    for (int i = 0; i < 4; ++i) result.push_back(run.trainer->train_step().loss);
    return result;
  };
  const std::vector<double> plain = losses(0.0, 0, "dropout_none"), first = losses(0.3, 0, "dropout_a"),
                            again = losses(0.3, 0, "dropout_b"), other_seed = losses(0.3, 1, "dropout_c");
  EXPECT_EQ(first, again);  // reproducible
  // Step 1 is the base model's (B = 0); after it dropout changes what the adapters learned.
  EXPECT_EQ(first[0], plain[0]);
  EXPECT_NE(first[3], plain[3]);
  EXPECT_NE(first[3], other_seed[3]);
}

// scale * B A in double, from the trainer's adapter.
std::vector<double> expected_merged(const Tensor& w, const Tensor& a, const Tensor& b, double scale) {
  const std::vector<float> wv = w.to_floats(), av = a.to_floats(), bv = b.to_floats();
  const int64_t out = w.size(0), in = w.size(1), r = a.size(0);
  std::vector<double> merged(wv.begin(), wv.end());
  for (int64_t i = 0; i < out; ++i) {
    for (int64_t j = 0; j < in; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < r; ++k) sum += static_cast<double>(bv[i * r + k]) * av[k * in + j];
      merged[i * in + j] += scale * sum;
    }
  }
  return merged;
}

TEST(Lora, MergedExportAndPeftAdapter) {
  ReferenceCase ref("lora_llama3_debug");
  train::JobConfig config = lora_config(ref, "export");
  config.training.steps = 3;
  config.checkpoint.enable = true;  // the last save: the model export (last_save_model_only)
  ReferenceTrainer run(ref, config);
  train::Trainer& trainer = *run.trainer;
  trainer.train();
  const fs::path folder = fs::path(config.job.dump_folder) / "checkpoint" / "step-000003";
  const double scale = config.lora.alpha / static_cast<double>(config.lora.rank);
  std::map<std::string, Tensor> trained = trainer.model().state_dict();

  // model.safetensors: the merged weights, no adapter tensors.
  checkpoint::SafetensorsReader merged((folder / "model.safetensors").string());
  for (const auto& entry : merged.header().entries) EXPECT_FALSE(is_adapter(entry.name)) << entry.name;
  for (const auto& [name, tensor] : trained) {
    if (is_adapter(name)) continue;
    ASSERT_TRUE(merged.contains(name)) << name;
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    const Tensor exported = merged.read(name);
    if (!trained.count(module + ".lora_A.weight")) {
      EXPECT_EQ(std::memcmp(exported.data_ptr(), tensor.data_ptr(), tensor.nbytes()), 0) << name;
      continue;
    }
    const std::vector<double> want =
        expected_merged(tensor, trained.at(module + ".lora_A.weight"), trained.at(module + ".lora_B.weight"), scale);
    const std::vector<float> got = exported.to_floats();
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - want[i]) / (std::abs(want[i]) + 1e-3));
    EXPECT_LE(worst, 1e-5) << name;
    // And the adapters really changed it.
    EXPECT_NE(std::memcmp(exported.data_ptr(), tensor.data_ptr(), tensor.nbytes()), 0) << name;
  }

  // The merged model computes the LoRA model's logits.
  const train::ExportedModel loaded = train::load_exported_model(folder.string());
  autograd::NoGradGuard no_grad;
  const models::DecoderInputs inputs{ref.get("input_ids.1"), {}, {}};
  EXPECT_TRUE(testing::all_close(loaded.model->logits(inputs), trainer.model().logits(inputs), 1e-5, 1e-5));

  // The PEFT folder: Hugging Face names and shapes, B in Hugging Face's RoPE row order.
  const fs::path adapter = folder / "adapter";
  std::ifstream config_file(adapter / "adapter_config.json");
  const nlohmann::json peft = nlohmann::json::parse(config_file);
  EXPECT_EQ(peft.at("peft_type"), "LORA");
  EXPECT_EQ(peft.at("task_type"), "CAUSAL_LM");
  EXPECT_EQ(peft.at("r"), 4);
  EXPECT_EQ(peft.at("lora_alpha"), 16.0);
  EXPECT_EQ(peft.at("bias"), "none");
  EXPECT_EQ(peft.at("fan_in_fan_out"), false);
  EXPECT_EQ(peft.at("target_modules"),
            nlohmann::json({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
  checkpoint::SafetensorsReader weights((adapter / "adapter_model.safetensors").string());
  EXPECT_EQ(weights.header().entries.size(), 6u * 7u * 2u);
  const std::string q = "base_model.model.model.layers.2.self_attn.q_proj";
  ASSERT_TRUE(weights.contains(q + ".lora_A.weight"));
  EXPECT_EQ(weights.read(q + ".lora_A.weight").shape(), (Shape{4, 256}));
  EXPECT_EQ(weights.read(q + ".lora_B.weight").shape(), (Shape{256, 4}));
  EXPECT_EQ(weights.read("base_model.model.model.layers.0.mlp.down_proj.lora_A.weight").shape(), (Shape{4, 768}));
  EXPECT_EQ(weights.read("base_model.model.model.layers.0.mlp.gate_proj.lora_B.weight").shape(), (Shape{768, 4}));
  const Tensor q_b = weights.read(q + ".lora_B.weight");
  const Tensor titan_b = trained.at("layers.2.attention.wq.lora_B.weight");
  const Tensor back = models::from_hf_layout("layers.2.attention.wq.weight", q_b, trainer.model().config);
  EXPECT_EQ(std::memcmp(back.data_ptr(), titan_b.data_ptr(), titan_b.nbytes()), 0);
  EXPECT_NE(std::memcmp(q_b.data_ptr(), titan_b.data_ptr(), titan_b.nbytes()), 0);  // interleaved RoPE: permuted

  // Read back and merged into the base: the export's weights.
  const models::PeftAdapter read = models::read_peft_adapter(adapter.string(), trainer.model().config);
  EXPECT_EQ(read.weights.size(), 6u * 7u);
  std::map<std::string, Tensor> base;
  for (const auto& [name, tensor] : trained) {
    if (!is_adapter(name)) base[name] = tensor.clone();
  }
  models::merge_peft_adapter(base, read);
  for (const auto& [name, tensor] : base) {
    EXPECT_TRUE(testing::all_close(tensor, merged.read(name), 1e-7, 1e-6)) << name;
  }

  // `titan convert --merge-lora`: the base model (an export of the adapters' Linear layers without them)
  // plus the PEFT folder, written as a Hugging Face folder, holds the merged weights.
  for (models::LoraAdapted& adapted : models::lora_adapters(trainer.model())) adapted.linear->remove_adapter();
  const fs::path base_export = fs::path(config.job.dump_folder) / "base_export",
                 hf = fs::path(config.job.dump_folder) / "hf";
  train::export_model(trainer.model(), config, base_export.string(), DType::f32);
  const std::string command = fmt::format("{} convert --from titan {} --to hf {} --merge-lora {} > /dev/null",
                                          TITAN_CLI_PATH, base_export.string(), hf.string(), adapter.string());
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const std::map<std::string, Tensor> converted =
      models::read_hf_weights(models::HfFolderReader(hf.string()), trainer.model().config, DType::f32);
  for (const auto& [name, tensor] : converted) {
    EXPECT_TRUE(testing::all_close(tensor, merged.read(name), 1e-7, 1e-6)) << name;
  }
}

TEST(Lora, ConfigurationErrorsNameTheKey) {
  auto message = [](const std::function<void(train::JobConfig&)>& change) {
    train::JobConfig config;
    change(config);
    try {
      train::validate(config);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([](auto& c) { c.lora.rank = 0; }).find("lora.rank"), std::string::npos);
  EXPECT_NE(message([](auto& c) { c.lora.alpha = -1; }).find("lora.alpha"), std::string::npos);
  EXPECT_NE(message([](auto& c) { c.lora.dropout = 1.0; }).find("lora.dropout"), std::string::npos);
  const std::string target = message([](auto& c) { c.lora.target_modules = {"q", "qkv"}; });
  EXPECT_NE(target.find("lora.target_modules"), std::string::npos) << target;
  EXPECT_NE(target.find("'qkv'"), std::string::npos) << target;
  EXPECT_EQ(message([](auto& c) { c.lora.target_modules = {"q_proj", "down_proj", "gate"}; }), "");
  EXPECT_NE(message([](auto& c) {
              c.lora.enable = true;
              c.lora.dropout = 0.1;
              c.activation_checkpoint.mode = "full";
            }).find("lora.dropout"),
            std::string::npos);

  // A target no module of the model has: a model whose every feed-forward is mixture-of-experts.
  const models::ModelSpec& spec = models::model_spec("qwen3_moe");
  models::DecoderConfig moe = spec.config("debugmodel", 256);
  for (auto& layer : moe.layers) layer = moe.layers.back();
  ASSERT_TRUE(moe.layers.front().moe.has_value());
  const std::shared_ptr<models::Decoder> model = spec.build(moe, Device::cpu());
  Generator generator(0);
  try {
    models::apply_lora(*model, {4, 8.0, 0.0, {"q", "up"}}, generator, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'up' matches no module"), std::string::npos) << e.what();
  }
}

}  // namespace lora_test
}  // namespace titan
