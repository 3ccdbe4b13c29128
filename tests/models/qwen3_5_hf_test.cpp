// Qwen3.5 <-> Hugging Face (models/qwen3_5/hf_family.h): the published
// config.json forms (text-only and the multimodal ones whose text_config
// holds the decoder) give titan's flavors, every key titan does not
// implement is refused by name, and HF folders in transformers' layouts
// (tests/reference/qwen3_5_hf.py: q_proj with the output gate per head,
// in_proj_qkv, conv1d [channels, 1, kernel], gate_up_proj / down_proj) load
// into a model whose logits, loss and every gradient match the float64
// reference computed from those HF tensors with transformers' maths; written
// back, the folder holds the very bits it was read from.
#include <gtest/gtest.h>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "support/model_checks.h"
#include "support/reference.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/decoder_config_diff.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/hf/hf_weights.h"
#include "titan/models/model_spec.h"

namespace titan {
namespace qwen3_5_hf_test {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Qwen3.5-35B-A3B's config.json as published (multimodal; vision keys abridged).
Json moe_35b_config() {
  Json text = {{"attention_bias", false},
               {"attention_dropout", 0.0},
               {"attn_output_gate", true},
               {"dtype", "bfloat16"},
               {"eos_token_id", 248044},
               {"full_attention_interval", 4},
               {"head_dim", 256},
               {"hidden_act", "silu"},
               {"hidden_size", 2048},
               {"initializer_range", 0.02},
               {"linear_conv_kernel_dim", 4},
               {"linear_key_head_dim", 128},
               {"linear_num_key_heads", 16},
               {"linear_num_value_heads", 32},
               {"linear_value_head_dim", 128},
               {"mamba_ssm_dtype", "float32"},
               {"max_position_embeddings", 262144},
               {"model_type", "qwen3_5_moe_text"},
               {"moe_intermediate_size", 512},
               {"mtp_num_hidden_layers", 1},
               {"mtp_use_dedicated_embeddings", false},
               {"num_attention_heads", 16},
               {"num_experts", 256},
               {"num_experts_per_tok", 8},
               {"num_hidden_layers", 40},
               {"num_key_value_heads", 2},
               {"rms_norm_eps", 1e-6},
               {"router_aux_loss_coef", 0.001},
               {"shared_expert_intermediate_size", 512},
               {"use_cache", true},
               {"vocab_size", 248320},
               {"rope_parameters",
                {{"mrope_interleaved", true},
                 {"mrope_section", {11, 11, 10}},
                 {"rope_type", "default"},
                 {"rope_theta", 10000000},
                 {"partial_rotary_factor", 0.25}}}};
  Json types = Json::array();
  for (int i = 0; i < 40; ++i) types.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  text["layer_types"] = types;
  return {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
          {"model_type", "qwen3_5_moe"},
          {"image_token_id", 248056},
          {"video_token_id", 248057},
          {"vision_start_token_id", 248053},
          {"vision_end_token_id", 248054},
          {"tie_word_embeddings", false},
          {"transformers_version", "4.57.0.dev0"},
          {"text_config", text},
          {"vision_config",
           {{"model_type", "qwen3_5_moe_vision"}, {"depth", 27}, {"hidden_size", 1152}, {"out_hidden_size", 2048}}}};
}

// Qwen3.5-27B's decoder as a text-only Qwen3_5ForCausalLM config.json (layer_types left to the every-4th rule).
Json dense_27b_config() {
  Json json = moe_35b_config()["text_config"];
  for (const char* key : {"moe_intermediate_size", "num_experts", "num_experts_per_tok", "router_aux_loss_coef",
                          "shared_expert_intermediate_size", "layer_types"}) {
    json.erase(key);
  }
  json.update({{"architectures", {"Qwen3_5ForCausalLM"}},
               {"model_type", "qwen3_5_text"},
               {"hidden_size", 5120},
               {"intermediate_size", 17408},
               {"num_hidden_layers", 64},
               {"num_attention_heads", 24},
               {"num_key_value_heads", 4},
               {"linear_num_value_heads", 48},
               {"tie_word_embeddings", false}});
  return json;
}

void expect_flavor(const Json& json, const std::string& flavor) {
  SCOPED_TRACE(flavor);
  const models::HfConfig hf = models::parse_hf_config(json.dump(), "config.json");
  const models::DecoderConfig config = models::decoder_config_from_hf(hf);
  const models::DecoderConfig expected = models::model_config("qwen3_5", flavor);
  EXPECT_TRUE(models::decoder_config_differences(config, expected).empty())
      << fmt::format("{}", fmt::join(models::decoder_config_differences(config, expected), "; "));
  EXPECT_EQ(models::matching_flavor("qwen3_5", config), flavor);
  // titan writes the text form of the model it has: the MoE architecture where it has experts.
  const models::HfConfig written = models::hf_config_from_decoder("qwen3_5", expected, DType::bf16);
  EXPECT_EQ(written.architecture, expected.layers.front().moe ? "Qwen3_5MoeForCausalLM" : "Qwen3_5ForCausalLM");
  const models::HfConfig back = models::parse_hf_config(models::hf_config_json(written), "written.json");
  EXPECT_TRUE(models::decoder_config_differences(models::decoder_config_from_hf(back), expected).empty());
}

TEST(Qwen3_5Hf, PublishedConfigsAreTheFlavors) {
  expect_flavor(moe_35b_config(), "35B-A3B");
  expect_flavor(dense_27b_config(), "27B");
  // Read as the text decoder alone, the multimodal file's text_config is the same model.
  Json text = moe_35b_config()["text_config"];
  text["architectures"] = {"Qwen3_5MoeForCausalLM"};
  expect_flavor(text, "35B-A3B");
}

// Each key whose value titan does not compute is an error naming the key.
TEST(Qwen3_5Hf, UnimplementedKeysAreRefusedByName) {
  const auto refused = [](Json json, const std::string& key, const Json& value, bool nested) {
    SCOPED_TRACE(key + " = " + value.dump());
    (nested ? json["text_config"] : json)[key] = value;
    try {
      models::parse_hf_config(json.dump(), "config.json");
      ADD_FAILURE() << key << " accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(key), std::string::npos) << error.what();
    }
  };
  const Json moe = moe_35b_config(), dense = dense_27b_config();
  refused(moe, "attn_output_gate", false, true);
  refused(moe, "mamba_ssm_dtype", "bfloat16", true);
  refused(moe, "shared_expert_intermediate_size", 300, true);
  refused(moe, "norm_topk_prob", false, true);
  refused(moe, "decoder_sparse_step", 2, true);
  refused(moe, "attention_bias", true, true);
  refused(moe, "use_sliding_window", true, true);
  refused(moe, "linear_num_value_heads", 24, true);
  refused(moe, "rope_parameters", Json{{"rope_type", "default"}, {"rope_theta", 1e7}, {"mrope_spread", 1}}, true);
  refused(moe, "model_type", "qwen3_5_text", true);  // a text_config of the other form
  Json types = Json::array();
  for (int i = 0; i < 64; ++i) types.push_back(i % 2 ? "full_attention" : "sliding_attention");
  refused(dense, "layer_types", types, false);
  refused(dense, "hidden_act", "gelu", false);
  refused(dense, "some_new_feature", 1, false);
}

// titan models that no Qwen3.5 form can say are refused on writing, naming what.
TEST(Qwen3_5Hf, ModelsWithoutAnHfFormAreRefused) {
  const auto refused = [](const models::DecoderConfig& config, const std::string& what) {
    try {
      models::hf_config_from_decoder("qwen3_5", config, DType::f32);
      ADD_FAILURE() << what << " accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(what), std::string::npos) << error.what();
    }
  };
  const models::DecoderConfig moe = models::model_config("qwen3_5", "debugmodel_moe");
  models::DecoderConfig mixed = moe;
  mixed.layers[1].moe.reset();
  mixed.layers[1].feed_forward = {.dim = 256, .hidden_dim = 512};
  refused(mixed, "dense");
  models::DecoderConfig no_conv = models::model_config("qwen3_5", "debugmodel");
  no_conv.layers[0].delta_net->short_conv = false;
  refused(no_conv, "short conv");
  models::DecoderConfig ungated = models::model_config("qwen3_5", "debugmodel");
  ungated.layers[3].attention.output_gate = false;
  refused(ungated, "output gate");
  models::DecoderConfig wider = moe;
  wider.layers[2].moe->num_experts = 16;
  refused(wider, "experts differ");
}

class Qwen3_5HfFolder : public ::testing::TestWithParam<std::string> {
 protected:
  // tests/reference/qwen3_5_hf.py's folder written out: its config.json and its HF tensors.
  void SetUp() override {
    ref_ = std::make_unique<testing::ReferenceCase>("model_qwen3_5_hf_" + GetParam());
    folder_ = ::testing::TempDir() + "/qwen3_5_hf_" + GetParam();
    fs::remove_all(folder_);
    fs::create_directories(folder_);
    std::ofstream(folder_ + "/config.json") << ref_->meta("config");
    checkpoint::NamedTensors tensors;
    for (const std::string& name : ref_->tensor_names()) {
      if (name.starts_with("hf.")) tensors.emplace_back(name.substr(3), ref_->get(name));
    }
    checkpoint::write_safetensors(folder_ + "/model.safetensors", tensors, {{"format", "pt"}});
  }

  std::unique_ptr<testing::ReferenceCase> ref_;
  std::string folder_;
};

TEST_P(Qwen3_5HfFolder, LoadsAsTransformersComputesIt) {
  const models::HfFolderReader reader(folder_);
  const models::DecoderConfig config = models::decoder_config_from_hf(reader.config());
  auto model = config.build();
  models::load_hf_weights_into(*model, folder_);
  testing::expect_f32_parity_with_reference(*model, *ref_, {ref_->get("input_ids"), {}, {}});
}

// Written as titan writes HF folders (`titan convert --to hf`: the text form),
// every HF tensor is the one read, bit for bit (the vision and MTP tensors
// left behind), and reading it back gives titan's tensors bit for bit.
TEST_P(Qwen3_5HfFolder, WritesBackTheSameBits) {
  const models::HfFolderReader reader(folder_);
  const models::DecoderConfig config = models::decoder_config_from_hf(reader.config());
  const std::map<std::string, Tensor> weights = models::read_hf_weights(reader, config);
  checkpoint::NamedTensors tensors(weights.begin(), weights.end());
  const std::string out = folder_ + "_written";
  models::write_hf_folder(out, "qwen3_5", config, tensors, models::HfWriteOptions{});
  const models::HfFolderReader written(out);
  const bool multimodal = !models::hf_family(reader.config()).text_model_type.empty();
  size_t compared = 0;
  for (const std::string& name : reader.tensor_names()) {
    if (name.starts_with("model.visual.") || name.starts_with("mtp.")) {
      EXPECT_FALSE(written.contains(name)) << name;
      continue;
    }
    std::string text_name = name;
    if (multimodal) text_name.replace(0, std::string("model.language_model.").size(), "model.");
    ASSERT_TRUE(written.contains(text_name)) << text_name;
    EXPECT_EQ(written.entry(text_name).shape, reader.entry(name).shape) << name;
    EXPECT_EQ(written.read(text_name).to_floats(), reader.read(name).to_floats()) << name;
    ++compared;
  }
  EXPECT_EQ(compared, written.tensor_names().size());
  const std::map<std::string, Tensor> back = models::read_hf_weights(written, config);
  for (const auto& [name, tensor] : weights) {
    ASSERT_TRUE(back.count(name)) << name;
    EXPECT_EQ(back.at(name).to_floats(), tensor.to_floats()) << name;
  }
  // bf16 files too: bf16-representable values come back as they went.
  checkpoint::NamedTensors rounded;
  for (const auto& [name, tensor] : weights) rounded.emplace_back(name, tensor.to(DType::bf16).to(DType::f32));
  models::HfWriteOptions bf16;
  bf16.dtype = DType::bf16;
  models::write_hf_folder(out, "qwen3_5", config, rounded, bf16);
  const std::map<std::string, Tensor> back16 = models::read_hf_weights(models::HfFolderReader(out), config);
  for (const auto& [name, tensor] : rounded) {
    // (The aux-loss-free expert bias has no HF tensor: it comes back as the model initialises it, zero, in f32.)
    if (!name.ends_with("moe.expert_bias")) {
      EXPECT_EQ(back16.at(name).dtype(), DType::bf16) << name;
    }
    EXPECT_EQ(back16.at(name).to(DType::f32).to_floats(), tensor.to_floats()) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, Qwen3_5HfFolder, ::testing::Values("dense", "moe"));

}  // namespace qwen3_5_hf_test
}  // namespace titan
