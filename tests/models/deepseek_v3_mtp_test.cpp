// DeepSeek-V3's multi-token prediction (nn/mtp_block.h, Decoder::mtp_loss)
// against the float64 PyTorch reference of TorchTitan's MTP
// (tests/reference/deepseek_v3.py, TINY["mtp"]: the latent tiny model with two
// depths of its MoE form, some targets ignored): logits, the total loss and
// every gradient, the depths' parameters included; the depths move the loss
// and never the logits; Hugging Face folders hold them as DeepSeek's do
// (layers L + k, with copies of the shared embedding table and head), bit for
// bit both ways, and a model without them loads such a folder.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "support/model_checks.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/copy.h"
#include "titan/models/decoder_size.h"
#include "titan/models/deepseek_v3/flavors.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/hf/hf_weights.h"
#include "titan/models/model_spec.h"

namespace titan {
namespace deepseek_v3_mtp_test {

// tests/reference/deepseek_v3.py's TINY["mtp"] as Args (TINY["latent"] with `depths` MTP depths).
models::deepseek_v3::Args tiny_mtp(int64_t depths) {
  models::deepseek_v3::Args a;
  a.dim = 64;
  a.n_layers = 3;
  a.n_dense_layers = 1;
  a.n_heads = 4;
  a.q_lora_rank = 24;
  a.kv_lora_rank = 32;
  a.qk_nope_head_dim = 16;
  a.qk_rope_head_dim = 8;
  a.v_head_dim = 12;
  a.dense_hidden_dim = 96;
  a.moe_hidden_dim = 32;
  a.num_experts = 8;
  a.num_shared_experts = 1;
  a.top_k = 3;
  a.score = "sigmoid";
  a.num_expert_groups = 4;
  a.num_limited_groups = 2;
  a.route_scale = 2.5;
  a.route_norm = true;
  a.vocab_size = 256;
  a.norm_eps = 1e-6;
  a.rope_factor = 1.0;
  a.max_seq_len = 64;
  a.num_mtp_layers = depths;
  return a;
}

// The model of `config` with the reference's weights and correction biases under their names.
std::shared_ptr<models::Decoder> with_weights(const models::DecoderConfig& config, const testing::ReferenceCase& ref) {
  auto model = config.build();
  std::map<std::string, Tensor> state;
  for (auto& [name, tensor] : model->state_dict()) {
    state[name] = ref.has("param." + name)    ? ref.get("param." + name)
                  : ref.has("buffer." + name) ? ref.get("buffer." + name)
                                              : tensor;
  }
  model->load_state_dict(state);
  return model;
}

TEST(DeepseekV3Mtp, LogitsLossAndEveryGradientMatchTheReference) {
  const testing::ReferenceCase ref("deepseek_v3_mtp");
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused loss" : "linear + cross-entropy");
    models::DecoderConfig config = models::deepseek_v3::to_config(tiny_mtp(2));
    config.loss.fused = fused;
    const auto model = with_weights(config, ref);
    ASSERT_EQ(model->mtp_layers->size(), 2u);
    testing::expect_f32_parity_with_reference(*model, ref, {ref.get("input_ids"), {}, {}});
    // The depths' own parameters and the shared head all received gradients from the MTP term.
    for (const char* name : {"mtp_layers.1.eh_proj.weight", "mtp_layers.0.enorm.weight", "mtp_layers.1.moe.experts.w2",
                             "mtp_layers.0.attention.wkv_b.weight"}) {
      ASSERT_TRUE(model->named_parameters().size() > 0);
      bool found = false;
      for (auto& [pname, parameter] : model->named_parameters()) {
        if (pname == name) found = parameter->data.grad().defined();
      }
      EXPECT_TRUE(found) << name;
    }
  }
}

// The same weights with and without the depths: identical logits (generation
// never runs them), a loss larger by exactly the MTP term, which mtp_scale 0 removes.
TEST(DeepseekV3Mtp, DepthsMoveTheLossNotTheLogits) {
  const testing::ReferenceCase ref("deepseek_v3_mtp");
  const models::DecoderInputs inputs{ref.get("input_ids"), {}, {}};
  const Tensor labels = ref.get("labels");
  const auto with_mtp = with_weights(models::deepseek_v3::to_config(tiny_mtp(2)), ref);
  const auto without = with_weights(models::deepseek_v3::to_config(tiny_mtp(0)), ref);
  EXPECT_EQ(with_mtp->logits(inputs).to_floats(), without->logits(inputs).to_floats());
  models::LossParts parts;
  const double total = with_mtp->loss(inputs, labels, &parts).item();
  const double main = without->loss(inputs, labels).item();
  ASSERT_TRUE(parts.mtp.defined());
  EXPECT_EQ(parts.lm.item(), main);
  EXPECT_GT(parts.mtp.item(), 0.1);  // 0.3 x a cross-entropy near ln 256 per depth
  EXPECT_NEAR(total, main + parts.mtp.item(), 1e-6 * total);
  models::DecoderConfig unweighted = models::deepseek_v3::to_config(tiny_mtp(2));
  unweighted.loss.mtp_scale = 0.0;
  EXPECT_EQ(with_weights(unweighted, ref)->loss(inputs, labels).item(), main);
}

TEST(DeepseekV3Mtp, ConfigKeys) {
  // TorchTitan's flavors have none (num_mtp_layers is a registry argument, 0 by default).
  EXPECT_TRUE(models::model_config("deepseek_v3", "671B").mtp_layers.empty());
  // DeepSeek's config.json key; transformers' class has no such key, so absent means none.
  models::HfConfig hf =
      models::hf_config_from_decoder("deepseek_v3", models::deepseek_v3::to_config(tiny_mtp(1)), DType::f32);
  ASSERT_TRUE(hf.mla.has_value());
  EXPECT_EQ(hf.mla->num_nextn_predict_layers, 1);
  const nlohmann::json json = nlohmann::json::parse(models::hf_config_json(hf));
  EXPECT_EQ(json.at("num_nextn_predict_layers"), 1);
  const models::DecoderConfig back = models::decoder_config_from_hf(models::parse_hf_config(json.dump(), "c"));
  ASSERT_EQ(back.mtp_layers.size(), 1u);
  EXPECT_TRUE(back.mtp_layers[0].moe.has_value());  // the last layer's form
  nlohmann::json none = json;
  none.erase("num_nextn_predict_layers");
  EXPECT_TRUE(models::decoder_config_from_hf(models::parse_hf_config(none.dump(), "c")).mtp_layers.empty());
  // The banner's parameter count includes the depths.
  const models::DecoderConfig two = models::deepseek_v3::to_config(tiny_mtp(2));
  int64_t built = 0;
  const auto meta = two.build(Device::meta());
  for (auto& [name, parameter] : meta->named_parameters()) built += parameter->data.numel();
  EXPECT_EQ(models::parameter_count(two), built);
  // Only a latent-attention family has a place for them.
  models::DecoderConfig llama = models::model_config("llama3", "debugmodel");
  llama.mtp_layers.push_back(llama.layers.back());
  EXPECT_THROW(models::hf_config_from_decoder("llama3", llama, DType::f32), Error);
}

std::string expect_error(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// Written as DeepSeek's files hold them (depth k is layer L + k - 1 with
// eh_proj, enorm, hnorm, shared_head.norm and copies of the shared table and
// head) and read back bit for bit; a model without depths loads the folder
// (dropping them with a note), and a copy that differs is refused by name.
TEST(DeepseekV3Mtp, HfFolderRoundTripIsBitwise) {
  const testing::ReferenceCase ref("deepseek_v3_mtp");
  const models::DecoderConfig config = models::deepseek_v3::to_config(tiny_mtp(2));
  const auto model = with_weights(config, ref);
  checkpoint::NamedTensors tensors;
  for (auto& [name, tensor] : model->state_dict()) tensors.emplace_back(name, tensor);
  const std::string folder = ::testing::TempDir() + "/deepseek_v3_mtp_hf";
  std::filesystem::remove_all(folder);
  models::write_hf_folder(folder, "deepseek_v3", config, tensors, {});
  const models::HfFolderReader reader(folder);
  ASSERT_TRUE(reader.config().mla.has_value());
  EXPECT_EQ(reader.config().mla->num_nextn_predict_layers, 2);
  for (const char* name :
       {"model.layers.3.enorm.weight", "model.layers.3.hnorm.weight", "model.layers.4.eh_proj.weight",
        "model.layers.4.shared_head.norm.weight", "model.layers.3.embed_tokens.weight",
        "model.layers.4.shared_head.head.weight", "model.layers.3.self_attn.kv_b_proj.weight",
        "model.layers.4.mlp.experts.7.down_proj.weight", "model.layers.4.mlp.gate.e_score_correction_bias"}) {
    EXPECT_TRUE(reader.contains(name)) << name;
  }
  EXPECT_EQ(reader.read("model.layers.4.shared_head.head.weight").to_floats(),
            reader.read("lm_head.weight").to_floats());
  const std::map<std::string, Tensor> back = models::read_hf_weights(reader, config);
  EXPECT_EQ(back.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(back.count(name));
    EXPECT_EQ(back.at(name).to_floats(), tensor.to_floats());
  }
  auto loaded = config.build();
  models::load_hf_weights_into(*loaded, folder);
  for (auto& [name, tensor] : loaded->state_dict()) EXPECT_EQ(tensor.to_floats(), back.at(name).to_floats()) << name;

  // MTP off: the depths' tensors are left out, the rest loads.
  const models::DecoderConfig plain = models::deepseek_v3::to_config(tiny_mtp(0));
  auto main_only = plain.build();
  models::load_hf_weights_into(*main_only, folder);
  for (auto& [name, tensor] : main_only->state_dict()) EXPECT_EQ(tensor.to_floats(), back.at(name).to_floats()) << name;

  // A copy of the head that is not the head: refused, naming it.
  const std::string tampered = ::testing::TempDir() + "/deepseek_v3_mtp_hf_tampered";
  std::filesystem::remove_all(tampered);
  std::filesystem::create_directories(tampered);
  std::filesystem::copy_file(folder + "/config.json", tampered + "/config.json");
  std::vector<checkpoint::SafetensorsWriter::Spec> specs;
  for (const std::string& name : reader.tensor_names()) {
    specs.push_back({name, reader.entry(name).dtype, reader.entry(name).shape});
  }
  {
    checkpoint::SafetensorsWriter writer(tampered + "/model.safetensors", specs, {{"format", "pt"}});
    for (const std::string& name : reader.tensor_names()) {
      Tensor tensor = reader.read(name).clone();
      if (name == "model.layers.3.shared_head.head.weight") titan::fill_(tensor.narrow(0, 5, 1), 0.5);
      writer.write(name, tensor);
    }
    writer.finish();
  }
  const models::HfFolderReader bad(tampered);
  const std::string error = expect_error([&] { models::read_hf_weights(bad, config); });
  EXPECT_NE(error.find("model.layers.3.shared_head.head.weight"), std::string::npos) << error;
  // A depth the file does not have is a missing tensor, named.
  const std::string missing =
      expect_error([&] { models::read_hf_weights(reader, models::deepseek_v3::to_config(tiny_mtp(3))); });
  EXPECT_NE(missing.find("model.layers.5."), std::string::npos) << missing;
}

}  // namespace deepseek_v3_mtp_test
}  // namespace titan
