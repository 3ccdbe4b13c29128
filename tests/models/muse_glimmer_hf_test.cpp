// Muse Glimmer through Hugging Face's MuseGlimmerForConditionalGeneration
// folders: a tiny random folder (tests/reference/make_muse_glimmer_cases.py,
// with NoPE and window lists off TorchTitan's rule, two vision tensors, and the
// float64 logits, loss and gradients of tests/reference/muse_glimmer_hf.py,
// written from transformers' computation) read by titan gives the reference's
// numbers; a folder written back holds the same bytes; the names are
// transformers'; every key titan does not implement is an error naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/models/decoder_config_diff.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/hf/hf_weights.h"
#include "titan/models/model_spec.h"

namespace titan {
namespace muse_glimmer_hf_test {

namespace fs = std::filesystem;

// f32 against float64 on a 4-layer, 64-wide model with a query multiplier of
// 2: titan's logits are 6.1e-7 off (relative L2), its worst gradient 2.5e-6;
// the bounds are ~8x and 10x that. A layer given RoPE that should have none
// moves the logits by 0.53 and the gradients by ~1 (checked by hand).
constexpr double kLogitsBound = 5e-6;
constexpr double kGradientBound = 2.5e-5;

const testing::ReferenceCase& reference() {
  static const testing::ReferenceCase ref("hf_muse_glimmer_tiny");
  return ref;
}

std::string folder() { return testing::reference_dir() + "/hf_muse_glimmer_tiny"; }

std::string config_text() {
  std::ifstream file(folder() + "/config.json");
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

const models::HfFamily& family() { return models::hf_family_for_model("muse_glimmer"); }

class MuseGlimmerHfParity : public ::testing::TestWithParam<std::string> {};

TEST_P(MuseGlimmerHfParity, ReadsTheTransformersFolder) {
  const models::HfFolderReader reader(folder());
  models::DecoderConfig config = models::decoder_config_from_hf(reader.config());
  // The folder's own lists: NoPE at layers 0 and 3, windows of 4 on layers 1 and 2.
  for (int64_t i = 0; i < 4; ++i) {
    const auto& a = config.layers[static_cast<size_t>(i)].attention;
    EXPECT_EQ(a.rope, i == 1 || i == 2) << i;
    EXPECT_EQ(a.sliding_window, i == 1 || i == 2 ? 4 : 0) << i;
  }
  config.edit_layers([&](nn::TransformerBlockConfig& layer) { layer.attention.attention_impl = GetParam(); });
  auto model = config.build();
  models::load_hf_weights_into(*model, folder());

  const testing::ReferenceCase& ref = reference();
  const models::DecoderInputs inputs{ref.get("input_ids"), {}, {}};
  {
    autograd::NoGradGuard no_grad;
    EXPECT_LT(testing::relative_l2_error(model->logits(inputs).view(ref.get("logits").shape()), ref.get("logits")),
              kLogitsBound);
  }
  const Tensor loss = model->loss(inputs, ref.get("labels"));
  EXPECT_NEAR(loss.item(), ref.get("loss").item(), 1e-5 * ref.get("loss").item());
  autograd::backward({loss});
  int64_t checked = 0;
  for (auto& [name, parameter] : model->named_parameters()) {
    const std::string hf = models::hf_tensor_name(family(), name);
    SCOPED_TRACE(name + " <- " + hf);
    ASSERT_TRUE(ref.has("grad." + hf));
    const Tensor grad = models::to_hf_layout(name, parameter->data.grad(), config);
    EXPECT_LT(testing::relative_l2_error(grad, ref.get("grad." + hf)), kGradientBound);
    ++checked;
  }
  // Embeddings, 4 x (q, k, v, o, gate, 3 FFN, 4 norms), final norm, lm_head.
  EXPECT_EQ(checked, 1 + 4 * 12 + 2);
}

INSTANTIATE_TEST_SUITE_P(Kernels, MuseGlimmerHfParity, ::testing::Values("flash", "naive"));

// transformers' names: the text tower under model.language_model., the gate
// as self_attn.gate_proj, the pre-FFN norm as pre_feedforward_layernorm.
TEST(MuseGlimmerHf, TensorNamesAreTransformers) {
  for (const auto& [titan_name, hf_name] : std::vector<std::pair<std::string, std::string>>{
           {"tok_embeddings.weight", "model.language_model.embed_tokens.weight"},
           {"norm.weight", "model.language_model.norm.weight"},
           {"output.weight", "lm_head.weight"},
           {"layers.2.attention.o_gate.weight", "model.language_model.layers.2.self_attn.gate_proj.weight"},
           {"layers.2.attention.wk.weight", "model.language_model.layers.2.self_attn.k_proj.weight"},
           {"layers.2.attention_norm.weight", "model.language_model.layers.2.input_layernorm.weight"},
           {"layers.2.post_attention_norm.weight", "model.language_model.layers.2.post_attention_layernorm.weight"},
           {"layers.2.ffn_norm.weight", "model.language_model.layers.2.pre_feedforward_layernorm.weight"},
           {"layers.2.post_ffn_norm.weight", "model.language_model.layers.2.post_feedforward_layernorm.weight"},
           {"layers.2.feed_forward.w1.weight", "model.language_model.layers.2.mlp.gate_proj.weight"}}) {
    EXPECT_EQ(models::hf_tensor_name(family(), titan_name), hf_name);
    EXPECT_EQ(models::titan_tensor_name(family(), hf_name), titan_name);
  }
  EXPECT_EQ(models::titan_tensor_name(family(), "model.layers.2.self_attn.k_proj.weight"), "");
  EXPECT_TRUE(models::hf_tensor_skipped(family(), "model.vision_tower.ln_pre.weight"));
  EXPECT_FALSE(models::hf_tensor_skipped(family(), "model.language_model.norm.weight"));
}

// Read, written back as f32 and read again: every text tensor holds the
// source folder's bytes (the q/k row permutation and the w-stored (1 + w)
// norms undone and redone exactly), the vision tensors are not written, and
// config.json says the same model; the config text round-trips exactly,
// the vision keys kept.
TEST(MuseGlimmerHf, FolderRoundTripIsBitwise) {
  const models::HfFolderReader source(folder());
  const models::DecoderConfig config = models::decoder_config_from_hf(source.config());
  const std::map<std::string, Tensor> weights = models::read_hf_weights(source, config);
  checkpoint::NamedTensors tensors(weights.begin(), weights.end());
  const std::string out = ::testing::TempDir() + "/muse_glimmer_hf_round_trip";
  fs::remove_all(out);
  models::write_hf_folder(out, "muse_glimmer", config, tensors, models::HfWriteOptions{});
  const models::HfFolderReader written(out);
  int64_t compared = 0;
  for (const std::string& name : source.tensor_names()) {
    if (models::hf_tensor_skipped(family(), name)) {
      EXPECT_FALSE(written.contains(name)) << name;
      continue;
    }
    ASSERT_TRUE(written.contains(name)) << name;
    EXPECT_EQ(written.read(name).to_floats(), source.read(name).to_floats()) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 1 + 4 * 12 + 2);
  EXPECT_EQ(written.tensor_names().size(), static_cast<size_t>(compared));
  EXPECT_TRUE(models::decoder_config_differences(models::decoder_config_from_hf(written.config()), config).empty());

  const models::HfConfig& hf = source.config();
  EXPECT_NE(hf.multimodal_keys.find("vision_config"), std::string::npos);
  EXPECT_TRUE(models::parse_hf_config(models::hf_config_json(hf), "written") == hf) << models::hf_config_json(hf);
}

// MuseGlimmerTextConfig's defaults are the 30B model: with TorchTitan's RoPE
// theta and context, the text config builds titan's 30B flavor but for the
// constants TorchTitan writes to 11 digits (43.784 / sqrt(128) against 3.87,
// 0.19611613513 against 1 / sqrt(26)), equal to 1e-10.
TEST(MuseGlimmerHf, DefaultTextConfigIsThe30bFlavor) {
  const std::string json = R"({"architectures": ["MuseGlimmerForConditionalGeneration"], "model_type": "muse_glimmer",
    "text_config": {"model_type": "muse_glimmer_text", "hidden_size": 6656, "intermediate_size": 19968,
      "num_hidden_layers": 52, "num_attention_heads": 32, "vocab_size": 202048, "max_position_embeddings": 16384,
      "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}, "torch_dtype": "bfloat16"})";
  const models::DecoderConfig config = models::decoder_config_from_hf(models::parse_hf_config(json, "config.json"));
  const models::DecoderConfig flavor = models::model_config("muse_glimmer", "30B");
  for (const std::string& difference : models::decoder_config_differences(config, flavor)) {
    EXPECT_TRUE(difference.find("query_scale") != std::string::npos ||
                difference.find("output_multiplier") != std::string::npos)
        << difference;
  }
  EXPECT_NEAR(config.layers[0].attention.query_scale, flavor.layers[0].attention.query_scale, 1e-10);
  EXPECT_NEAR(config.output_multiplier, flavor.output_multiplier, 1e-10);
  // Layers 3, 7, ... 51 (counted back from the last) are global and without RoPE.
  for (size_t i = 0; i < config.layers.size(); ++i) {
    EXPECT_EQ(config.layers[i].attention.rope, i % 4 != 3) << i;
    EXPECT_EQ(config.layers[i].attention.sliding_window, i % 4 != 3 ? 2048 : 0) << i;
  }
}

// Each key titan does not implement, or a value it cannot compute, is an error naming the key.
TEST(MuseGlimmerHf, RefusesWhatTitanDoesNotImplement) {
  const auto refused = [](const std::function<void(nlohmann::json&)>& edit, const std::string& fragment) {
    nlohmann::json json = nlohmann::json::parse(config_text());
    edit(json);
    testing::expect_error([&] { models::parse_hf_config(json.dump(), "config.json"); }, {"config.json", fragment});
  };
  refused([](auto& j) { j["text_config"]["attention_bias"] = true; }, "attention_bias");
  refused([](auto& j) { j["text_config"]["attention_dropout"] = 0.1; }, "attention_dropout");
  refused([](auto& j) { j["text_config"]["use_qk_clip"] = true; }, "use_qk_clip");
  refused([](auto& j) { j["text_config"]["hidden_activation"] = "gelu"; }, "hidden_activation");
  refused([](auto& j) { j["text_config"]["final_logit_softcapping"] = nullptr; }, "final_logit_softcapping");
  refused([](auto& j) { j["text_config"]["layer_rope_theta"][1] = 10000.0; }, "layer_rope_theta");
  refused([](auto& j) { j["text_config"]["layer_rope_theta"] = {0, 1}; }, "layer_rope_theta");
  refused([](auto& j) { j["text_config"]["layer_types"][1] = "chunked_attention"; }, "layer_types");
  refused([](auto& j) { j["text_config"]["model_type"] = "llama"; }, "model_type");
  refused([](auto& j) { j["tie_word_embeddings"] = true; }, "tie_word_embeddings");
  refused([](auto& j) { j.erase("text_config"); }, "text_config");
  refused([](auto& j) { j["text_config"]["rope_parameters"]["rope_type"] = "ntk"; }, "rope_parameters");

  // And titan models the family cannot express.
  const models::DecoderConfig flavor = models::model_config("muse_glimmer", "debugmodel");
  models::DecoderConfig uncapped = flavor;
  uncapped.loss.softcap = 0.0f;
  testing::expect_error([&] { models::hf_config_from_decoder("muse_glimmer", uncapped, DType::f32); },
                        {"soft-cap", "MuseGlimmerForConditionalGeneration"});
  models::DecoderConfig two_windows = flavor;
  two_windows.layers[1].attention.sliding_window = 64;
  testing::expect_error([&] { models::hf_config_from_decoder("muse_glimmer", two_windows, DType::f32); },
                        {"different windows"});
  // Its gate and NoPE layers have no Llama equivalent.
  testing::expect_error([&] { models::hf_config_from_decoder("llama3", flavor, DType::f32); }, {"LlamaForCausalLM"});
}

}  // namespace muse_glimmer_hf_test
}  // namespace titan
