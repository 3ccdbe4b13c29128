// gpt-oss (models/gpt_oss) against the float64 PyTorch reference of Hugging
// Face's GptOssForCausalLM (tests/reference/gpt_oss.py) fed the same weights:
// logits, loss and every parameter gradient, in f32 with both attention
// kernels and in bf16 mixed precision; generation through the KV cache past
// the sliding window against the full forward; each distinctive feature
// switched off moves the logits; the flavors' parameter counts against the
// published ones; Hugging Face in/out: the published config.json, the
// experts' interleaved layout (against the reference's), bitwise folder round
// trips and a folder whose experts are MXFP4 blocks and scales.
#include <gtest/gtest.h>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "support/model_checks.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/copy.h"
#include "titan/models/decoder_config_diff.h"
#include "titan/models/decoder_size.h"
#include "titan/models/generate.h"
#include "titan/models/gpt_oss/flavors.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/hf/hf_weights.h"
#include "titan/models/model_spec.h"
#include "titan/ops/elementwise.h"
#include "titan/parallel/mixed_precision.h"

namespace titan {
namespace gpt_oss_test {

using models::gpt_oss::Args;

// tests/reference/gpt_oss.py's TINY model, as Args.
Args tiny() {
  return Args{.dim = 64,
              .n_layers = 3,
              .n_heads = 4,
              .n_kv_heads = 2,
              .head_dim = 16,
              .hidden_dim = 32,
              .num_experts = 8,
              .top_k = 3,
              .sliding_window = 8,
              .vocab_size = 256,
              .norm_eps = 1e-5,
              .rope_theta = 150000.0,
              .rope_factor = 32.0,
              .beta_fast = 32.0,
              .beta_slow = 1.0,
              .original_max_seq_len = 4096,
              .swiglu_alpha = 1.702,
              .swiglu_limit = 0.5,
              .max_seq_len = 64};
}

const testing::ReferenceCase& reference() {
  static const testing::ReferenceCase ref("gpt_oss_tiny");
  return ref;
}

// The model of `config` with the reference's weights wherever the names and
// shapes match, the rest drawn by init_weights (a feature switched off drops
// its parameters; one switched on keeps the reference's).
std::shared_ptr<models::Decoder> with_reference_weights(const models::DecoderConfig& config) {
  const testing::ReferenceCase& ref = reference();
  auto model = config.build();
  model->init_weights(Generator(3));
  for (auto& [pname, parameter] : model->named_parameters()) {
    if (ref.has("param." + pname) && ref.get("param." + pname).shape() == parameter->data.shape()) {
      titan::copy_(parameter->data, ref.get("param." + pname));
    }
  }
  return model;
}

models::DecoderConfig tiny_config(const std::string& attention = "flash") {
  models::DecoderConfig config = models::gpt_oss::to_config(tiny());
  config.edit_layers([&](nn::TransformerBlockConfig& layer) { layer.attention.attention_impl = attention; });
  return config;
}

class GptOssParity : public ::testing::TestWithParam<std::string> {};

TEST_P(GptOssParity, LogitsLossAndGradients) {
  const testing::ReferenceCase& ref = reference();
  const auto model = with_reference_weights(tiny_config(GetParam()));
  const std::vector<std::string> names = ref.tensor_names();
  ASSERT_EQ(model->named_parameters().size(),
            static_cast<size_t>(std::count_if(names.begin(), names.end(),
                                              [](const std::string& n) { return n.rfind("param.", 0) == 0; })));
  const models::DecoderInputs inputs{ref.get("input_ids"), {}, {}};
  testing::expect_f32_parity_with_reference(*model, ref, inputs);
}

INSTANTIATE_TEST_SUITE_P(Kernels, GptOssParity, ::testing::Values("flash", "naive"));

// bf16 weights and activations (f32 master weights and router scores)
// against the same float64 reference: whole-tensor relative errors, as for
// Qwen3-MoE and DeepSeek-V3 (a rounding can flip one token's near-tied expert
// choice, and a clamp's edge).
TEST(GptOssBf16, TracksTheReference) {
  const testing::ReferenceCase& ref = reference();
  const auto model = with_reference_weights(tiny_config());
  parallel::apply_mixed_precision(*model, DType::bf16);
  const models::DecoderInputs inputs{ref.get("input_ids"), {}, {}};
  const Tensor expected_logits = ref.get("logits");
  EXPECT_LT(
      testing::relative_l2_error(model->logits(inputs).to(DType::f32).view(expected_logits.shape()), expected_logits),
      5e-2);
  const Tensor loss = model->loss(inputs, ref.get("labels"));
  EXPECT_NEAR(loss.item(), ref.get("loss").item(), 1e-2 * ref.get("loss").item());
  autograd::backward({loss});
  for (auto& [pname, parameter] : model->named_parameters()) {
    const bool routed = pname.find(".moe.") != std::string::npos || (pname.find("ffn_norm") != std::string::npos);
    EXPECT_LT(testing::relative_l2_error(parameter->data.grad(), ref.get("grad." + pname)), routed ? 0.35 : 0.05)
        << pname;
  }
}

Tensor sample_ids(int64_t batch, int64_t seq, int64_t vocab) {
  std::vector<int64_t> ids(static_cast<size_t>(batch * seq));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 37 + 11) % static_cast<size_t>(vocab));
  return Tensor::from_vector(ids, {batch, seq});
}

// Decoding from the cache past the 8-token window (the sliding layers then
// see only their window, the sinks still join every row) gives the full
// forward's logits; greedy generation is the full forward's argmax.
TEST(GptOssGenerate, CacheMatchesTheFullForward) {
  auto model = with_reference_weights(tiny_config());
  autograd::NoGradGuard no_grad;
  const Tensor ids = sample_ids(1, 14, tiny().vocab_size);
  const Tensor full = model->logits({ids, {}, {}});
  EXPECT_TRUE(testing::all_close(testing::cached_logits(*model, ids, 5), full, 1e-4, 1e-4));
  testing::expect_greedy_is_full_forward_argmax(*model, {3, 141, 59, 26}, 10);
}

// Every distinctive feature, switched off alone, changes the logits of the same weights.
TEST(GptOssFeatures, EachOneSwitchedOffMovesTheLogits) {
  const Tensor ids = sample_ids(2, 16, tiny().vocab_size);
  autograd::NoGradGuard no_grad;
  const Tensor reference_logits = with_reference_weights(tiny_config())->logits({ids, {}, {}});
  const auto moved = [&](const std::string& feature, const std::function<void(models::DecoderConfig&)>& edit) {
    models::DecoderConfig config = tiny_config();
    edit(config);
    const double change =
        testing::relative_l2_error(with_reference_weights(config)->logits({ids, {}, {}}), reference_logits);
    // A feature that changes nothing leaves the logits as they were (to f32 rounding, 1e-6).
    EXPECT_GT(change, 1e-3) << feature;
  };
  const auto layers = [](const std::function<void(nn::TransformerBlockConfig&)>& edit) {
    return [edit](models::DecoderConfig& config) { config.edit_layers(edit); };
  };
  moved("sinks", layers([](nn::TransformerBlockConfig& l) { l.attention.sinks = false; }));
  moved("q/k/v biases", layers([](nn::TransformerBlockConfig& l) { l.attention.qkv_bias = false; }));
  moved("output bias", layers([](nn::TransformerBlockConfig& l) { l.attention.output_bias = false; }));
  moved("sliding windows", layers([](nn::TransformerBlockConfig& l) { l.attention.sliding_window = 0; }));
  moved("router bias", layers([](nn::TransformerBlockConfig& l) { l.moe->router_bias = false; }));
  moved("expert biases", layers([](nn::TransformerBlockConfig& l) { l.moe->expert_biases = false; }));
  moved("clamps", layers([](nn::TransformerBlockConfig& l) { l.moe->swiglu_limit = 1e9; }));
  moved("plain SwiGLU",
        layers([](nn::TransformerBlockConfig& l) { l.moe->activation = nn::ExpertActivation::swiglu; }));
  moved("YaRN", [](models::DecoderConfig& c) { c.rope_scaling = {}; });
}

// The plain expert path (one GEMM per expert, expert_impl loop) computes the
// biased, clamped experts as the grouped one does: the same logits to f32 rounding.
TEST(GptOssFeatures, LoopedExpertsMatchGroupedOnes) {
  const Tensor ids = sample_ids(2, 16, tiny().vocab_size);
  autograd::NoGradGuard no_grad;
  const Tensor grouped = with_reference_weights(tiny_config())->logits({ids, {}, {}});
  models::DecoderConfig config = tiny_config();
  config.edit_layers([](nn::TransformerBlockConfig& layer) { layer.moe->expert_impl = nn::ExpertImpl::loop; });
  EXPECT_TRUE(testing::all_close(with_reference_weights(config)->logits({ids, {}, {}}), grouped, 1e-5, 1e-5));
}

// The clamped SwiGLU op on a grid through both clamps, in f32 and bf16,
// against the formula in double; its gradients against central differences
// away from the clamps' edges, and zero beyond them.
TEST(GptOssClampedSwiglu, MatchesTheFormulaAndItsDerivative) {
  const float alpha = 1.702f, limit = 1.5f;
  std::vector<float> gate, up;
  for (int i = 0; i < 41; ++i) {
    for (int j = 0; j < 41; ++j) {
      gate.push_back(-4.0f + 0.2f * static_cast<float>(i) + 0.013f);
      up.push_back(-4.0f + 0.2f * static_cast<float>(j) + 0.007f);
    }
  }
  const auto formula = [&](double g, double u) {
    const double v = std::min(g, static_cast<double>(limit));
    const double w = std::clamp(u, -static_cast<double>(limit), static_cast<double>(limit));
    return v / (1.0 + std::exp(-alpha * v)) * (w + 1.0);
  };
  const int64_t n = static_cast<int64_t>(gate.size());
  const Tensor g = Tensor::from_vector(gate, {n}), u = Tensor::from_vector(up, {n});
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::vector<float> got = ops::clamped_swiglu(g.to(dtype), u.to(dtype), alpha, limit).to_floats();
    const std::vector<float> rounded_g = g.to(dtype).to_floats(), rounded_u = u.to(dtype).to_floats();
    for (size_t i = 0; i < got.size(); ++i) {
      const double expected = formula(rounded_g[i], rounded_u[i]);
      const double tol = dtype == DType::f32 ? 1e-6 : 1e-2;
      EXPECT_NEAR(got[i], expected, tol * (1.0 + std::abs(expected))) << i;
    }
  }
  const auto [grad_gate, grad_up] = ops::clamped_swiglu_backward(Tensor::full({n}, 1.0), g, u, alpha, limit);
  const std::vector<float> dg = grad_gate.to_floats(), du = grad_up.to_floats();
  const double h = 1e-4;
  for (size_t i = 0; i < gate.size(); ++i) {
    const double expected_g = (formula(gate[i] + h, up[i]) - formula(gate[i] - h, up[i])) / (2 * h);
    const double expected_u = (formula(gate[i], up[i] + h) - formula(gate[i], up[i] - h)) / (2 * h);
    EXPECT_NEAR(dg[i], expected_g, 1e-4 * (1.0 + std::abs(expected_g))) << gate[i] << " " << up[i];
    EXPECT_NEAR(du[i], expected_u, 1e-4 * (1.0 + std::abs(expected_u))) << gate[i] << " " << up[i];
  }
}

// gpt-oss-20b and gpt-oss-120b as OpenAI's model card counts them: 20.91B
// and 116.83B parameters, 3.61B and 5.13B active per token (the input
// embedding table left out of the active count).
TEST(GptOssFlavors, MatchPublishedCounts) {
  struct Published {
    std::string flavor;
    double total, active;
  };
  for (const auto& p : std::vector<Published>{{"20b", 20.91, 3.61}, {"120b", 116.83, 5.13}}) {
    const models::DecoderConfig config = models::model_config("gpt_oss", p.flavor);
    const double embedding = static_cast<double>(config.vocab_size * config.dim());
    EXPECT_NEAR(static_cast<double>(models::parameter_count(config)) / 1e9, p.total, 0.006) << p.flavor;
    EXPECT_NEAR((static_cast<double>(models::active_parameter_count(config)) - embedding) / 1e9, p.active, 0.006)
        << p.flavor;
    auto decoder = config.build(Device::meta());
    EXPECT_EQ(decoder->num_parameters(), models::parameter_count(config)) << p.flavor;
    for (int64_t i = 0; i < config.n_layers(); ++i) {
      EXPECT_EQ(config.layers[static_cast<size_t>(i)].attention.sliding_window, i % 2 == 0 ? 128 : 0);
    }
  }
}

// gpt-oss-20b's published config.json (the keys that shape the model, its
// MXFP4 quantization_config included) reads as the 20b flavor, and writes
// back to the same model; what GptOssForCausalLM cannot be is refused by name.
constexpr const char* kGptOss20bConfig = R"({
  "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": true,
  "attention_dropout": 0.0, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
  "intermediate_size": 2880, "max_position_embeddings": 131072, "num_attention_heads": 64,
  "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
  "output_router_logits": false, "rms_norm_eps": 1e-05, "router_aux_loss_coef": 0.9, "sliding_window": 128,
  "swiglu_limit": 7.0, "tie_word_embeddings": false, "vocab_size": 201088, "rope_theta": 150000,
  "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                   "rope_type": "yarn", "truncate": false},
  "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                     "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
  "torch_dtype": "bfloat16"})";

TEST(GptOssHf, PublishedConfigIsThe20bFlavor) {
  nlohmann::json json = nlohmann::json::parse(kGptOss20bConfig);
  const models::DecoderConfig flavor = models::model_config("gpt_oss", "20b");
  for (bool with_layer_types : {false, true}) {
    if (with_layer_types) {
      json["layer_types"] = nlohmann::json::array();
      for (int i = 0; i < 24; ++i) json["layer_types"].push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    }
    const models::DecoderConfig config =
        models::decoder_config_from_hf(models::parse_hf_config(json.dump(), "config.json"));
    EXPECT_TRUE(models::decoder_config_differences(config, flavor).empty())
        << fmt::format("{}", fmt::join(models::decoder_config_differences(config, flavor), "; "));
    EXPECT_EQ(config.rope_scaling, flavor.rope_scaling);
    EXPECT_EQ(models::matching_flavor("gpt_oss", config), "20b");
  }
  const models::HfConfig back = models::hf_config_from_decoder("gpt_oss", flavor, DType::bf16);
  EXPECT_TRUE(models::decoder_config_differences(
                  models::decoder_config_from_hf(models::parse_hf_config(models::hf_config_json(back), "w")), flavor)
                  .empty());

  const auto refused = [](const std::string& key, const std::string& value) {
    nlohmann::json edited = nlohmann::json::parse(kGptOss20bConfig);
    edited[key] = nlohmann::json::parse(value);
    try {
      models::parse_hf_config(edited.dump(), "config.json");
      ADD_FAILURE() << key << " accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(key), std::string::npos) << error.what();
    }
  };
  refused("attention_bias", "false");
  refused("quantization_config", R"({"quant_method": "fp8"})");
  refused("layer_types", R"(["chunked_attention"])");
  refused("num_local_experts", "null");
  // A window on the odd layers instead is not gpt-oss's.
  models::DecoderConfig odd = flavor;
  for (size_t i = 0; i < odd.layers.size(); ++i) odd.layers[i].attention.sliding_window = i % 2 == 1 ? 128 : 0;
  EXPECT_THROW(models::hf_config_from_decoder("gpt_oss", odd, DType::bf16), Error);
}

// The titan <-> transformers names, and the experts' layout: gate_up_proj
// built from w1 and w3 is the reference's (tests/reference/gpt_oss.py, gate
// in the even columns), down_proj w2 transposed; and back to w1, w3, w2.
TEST(GptOssHf, TensorNamesAndExpertLayoutAreTransformers) {
  const models::HfFamily& family = models::hf_family_for_model("gpt_oss");
  for (const auto& [titan_name, hf_name] : std::vector<std::pair<std::string, std::string>>{
           {"layers.1.attention.wo.bias", "model.layers.1.self_attn.o_proj.bias"},
           {"layers.1.attention.wq.bias", "model.layers.1.self_attn.q_proj.bias"},
           {"layers.1.attention.sinks", "model.layers.1.self_attn.sinks"},
           {"layers.1.moe.router.gate.weight", "model.layers.1.mlp.router.weight"},
           {"layers.1.moe.router.gate.bias", "model.layers.1.mlp.router.bias"},
           {"layers.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight"}}) {
    EXPECT_EQ(models::hf_tensor_name(family, titan_name), hf_name);
    EXPECT_EQ(models::titan_tensor_name(family, hf_name), titan_name);
  }
  const testing::ReferenceCase& ref = reference();
  const std::string p = "param.layers.0.moe.experts.";
  const Tensor gate_up =
      models::to_hf_expert_tensor(models::HfTensorLayout::experts_interleaved, {ref.get(p + "w1"), ref.get(p + "w3")});
  EXPECT_EQ(gate_up.to_floats(), ref.get("hf.gate_up_proj").to_floats());
  const Tensor gate_up_bias =
      models::to_hf_expert_tensor(models::HfTensorLayout::experts_interleaved, {ref.get(p + "b1"), ref.get(p + "b3")});
  EXPECT_EQ(gate_up_bias.to_floats(), ref.get("hf.gate_up_proj_bias").to_floats());
  const Tensor down = models::to_hf_expert_tensor(models::HfTensorLayout::experts_transposed, {ref.get(p + "w2")});
  EXPECT_EQ(down.to_floats(), ref.get("hf.down_proj").to_floats());
  EXPECT_EQ(models::from_hf_expert_tensor(models::HfTensorLayout::experts_interleaved, gate_up, 1).to_floats(),
            ref.get(p + "w3").to_floats());
  EXPECT_EQ(models::from_hf_expert_tensor(models::HfTensorLayout::experts_transposed, down, 0).to_floats(),
            ref.get(p + "w2").to_floats());
}

// A model written as a GptOssForCausalLM folder and read back: every tensor
// bit for bit (f32, and bf16 from bf16-representable values); the folder also
// loads into a built model the same way.
TEST(GptOssHf, FolderRoundTripIsBitwise) {
  const models::DecoderConfig config = tiny_config();
  const auto model = with_reference_weights(config);
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    checkpoint::NamedTensors tensors;
    for (auto& [name, tensor] : model->state_dict()) tensors.emplace_back(name, tensor.to(dtype).to(DType::f32));
    const std::string folder = ::testing::TempDir() + "/gpt_oss_hf_round_trip";
    std::filesystem::remove_all(folder);
    models::HfWriteOptions options;
    options.dtype = dtype;
    models::write_hf_folder(folder, "gpt_oss", config, tensors, options);
    const models::HfFolderReader reader(folder);
    EXPECT_EQ(reader.entry("model.layers.2.mlp.experts.gate_up_proj").shape, (Shape{8, 64, 64}));
    EXPECT_EQ(reader.entry("model.layers.2.mlp.experts.down_proj").shape, (Shape{8, 32, 64}));
    const std::map<std::string, Tensor> back = models::read_hf_weights(reader, config);
    for (const auto& [name, tensor] : tensors) {
      ASSERT_TRUE(back.count(name)) << name;
      EXPECT_EQ(back.at(name).to(DType::f32).to_floats(), tensor.to_floats()) << name;
    }
    auto loaded = config.build();
    models::load_hf_weights_into(*loaded, folder);
    for (auto& [name, tensor] : loaded->state_dict()) {
      EXPECT_EQ(tensor.to_floats(), back.at(name).to(DType::f32).to_floats()) << name;
    }
  }
}

// E2M1 by its definition (sign, exponent bias 1, one mantissa bit), apart from the decoder under test.
float e2m1(uint8_t code) {
  static const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (code & 8) ? -magnitude[code & 7] : magnitude[code & 7];
}

// A folder whose experts' gate_up_proj and down_proj are MXFP4 blocks and
// scales (random codes and scales, as the published checkpoints store them)
// loads as the values they encode: the decoded [E, out, in] rows are
// titan's w2, and w1 / w3 from the even / odd rows of gate_up. A folder
// missing a scales tensor is refused, naming the tensor.
TEST(GptOssHf, LoadsMxfp4Experts) {
  const models::DecoderConfig config = tiny_config();
  const auto model = with_reference_weights(config);
  checkpoint::NamedTensors tensors;
  for (auto& [name, tensor] : model->state_dict()) tensors.emplace_back(name, tensor);
  const std::string dense = ::testing::TempDir() + "/gpt_oss_hf_dense";
  const std::string quantized = ::testing::TempDir() + "/gpt_oss_hf_mxfp4";
  std::filesystem::remove_all(dense);
  models::HfWriteOptions options;
  options.dtype = DType::bf16;
  models::write_hf_folder(dense, "gpt_oss", config, tensors, options);
  const models::HfFolderReader reader(dense);

  std::mt19937 random(11);
  std::map<std::string, std::pair<Tensor, Tensor>> codes;  // HF name -> blocks, scales
  std::vector<checkpoint::SafetensorsWriter::Spec> specs;
  for (const std::string& name : reader.tensor_names()) {
    const bool expert_weight = name.ends_with("experts.gate_up_proj") || name.ends_with("experts.down_proj");
    if (!expert_weight) {
      specs.push_back({name, reader.entry(name).dtype, reader.entry(name).shape});
      continue;
    }
    const Shape hf = reader.entry(name).shape;  // [E, in, out]: blocks of the [E, out, in] rows
    const int64_t experts = hf[0], rows = hf[2], groups = hf[1] / 32;
    std::vector<uint8_t> blocks(static_cast<size_t>(experts * rows * groups * 16)),
        scales(static_cast<size_t>(experts * rows * groups));
    for (uint8_t& b : blocks) b = static_cast<uint8_t>(random() & 0xFF);
    for (uint8_t& s : scales) s = static_cast<uint8_t>(120 + random() % 8);
    codes[name] = {Tensor::from_vector(blocks, {experts, rows, groups, 16}),
                   Tensor::from_vector(scales, {experts, rows, groups})};
    specs.push_back({name + "_blocks", DType::u8, {experts, rows, groups, 16}});
    specs.push_back({name + "_scales", DType::u8, {experts, rows, groups}});
  }
  const auto write_folder = [&](bool drop_a_scale) {
    std::filesystem::remove_all(quantized);
    std::filesystem::create_directories(quantized);
    std::filesystem::copy_file(dense + "/config.json", quantized + "/config.json");
    std::vector<checkpoint::SafetensorsWriter::Spec> kept;
    const std::string dropped = "model.layers.1.mlp.experts.down_proj_scales";
    for (const auto& spec : specs) {
      if (!drop_a_scale || spec.name != dropped) kept.push_back(spec);
    }
    checkpoint::SafetensorsWriter writer(quantized + "/model.safetensors", kept, {{"format", "pt"}});
    for (const auto& spec : kept) {
      if (spec.name.ends_with("_blocks")) {
        writer.write(spec.name, codes.at(spec.name.substr(0, spec.name.size() - 7)).first);
      } else if (spec.name.ends_with("_scales")) {
        writer.write(spec.name, codes.at(spec.name.substr(0, spec.name.size() - 7)).second);
      } else {
        writer.write(spec.name, reader.read(spec.name));
      }
    }
    writer.finish();
  };
  write_folder(false);
  // The values the codes encode, [E, out, in], by the format's definition.
  const auto decoded = [&](const std::string& hf_name) {
    const auto& [blocks, scales] = codes.at(hf_name);
    const int64_t experts = blocks.size(0), rows = blocks.size(1), groups = blocks.size(2);
    const std::vector<int64_t> b = blocks.to(DType::i64).to_ints(), s = scales.to(DType::i64).to_ints();
    std::vector<float> values(static_cast<size_t>(experts * rows * groups * 32));
    for (size_t block = 0; block < s.size(); ++block) {
      const float scale = std::ldexp(1.0f, static_cast<int>(s[block]) - 127);
      for (size_t j = 0; j < 16; ++j) {
        const auto byte = static_cast<uint8_t>(b[block * 16 + j]);
        values[block * 32 + 2 * j] = e2m1(byte & 0xF) * scale;
        values[block * 32 + 2 * j + 1] = e2m1(byte >> 4) * scale;
      }
    }
    return Tensor::from_vector(values, {experts, rows, groups * 32});
  };
  const models::HfFolderReader mxfp4(quantized);
  const std::map<std::string, Tensor> back = models::read_hf_weights(mxfp4, config);
  for (int64_t layer = 0; layer < config.n_layers(); ++layer) {
    SCOPED_TRACE(layer);
    const std::string hf = fmt::format("model.layers.{}.mlp.experts.", layer);
    const std::string titan = fmt::format("layers.{}.moe.experts.", layer);
    const Tensor gate_up = decoded(hf + "gate_up_proj");  // [E, 2 hidden, dim], gate rows even
    const Tensor w1 = gate_up.slice(1, 0, gate_up.size(1), 2).contiguous();
    const Tensor w3 = gate_up.slice(1, 1, gate_up.size(1), 2).contiguous();
    EXPECT_EQ(back.at(titan + "w1").to(DType::f32).to_floats(), w1.to_floats());
    EXPECT_EQ(back.at(titan + "w3").to(DType::f32).to_floats(), w3.to_floats());
    EXPECT_EQ(back.at(titan + "w2").to(DType::f32).to_floats(), decoded(hf + "down_proj").to_floats());
    // The biases stay as written (bf16).
    EXPECT_EQ(back.at(titan + "b2").to(DType::f32).to_floats(),
              model->state_dict().at(titan + "b2").to(DType::bf16).to(DType::f32).to_floats());
  }
  auto loaded = config.build();
  models::load_hf_weights_into(*loaded, quantized);
  EXPECT_EQ(loaded->state_dict().at("layers.0.moe.experts.w3").to_floats(),
            back.at("layers.0.moe.experts.w3").to(DType::f32).to_floats());

  write_folder(true);
  try {
    const models::HfFolderReader broken(quantized);
    models::read_hf_weights(broken, config);
    ADD_FAILURE() << "a folder without down_proj_scales loaded";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("model.layers.1.mlp.experts.down_proj"), std::string::npos)
        << error.what();
  }
}

// 20 f32 AdamW steps of the tiny model (sinks, windows, biases, clamped
// SwiGLU experts) against tests/reference/training_run.py's float64 run of
// the same steps: losses, gradient norms and final weights within issue 31's
// 1e-4 (measured: 1e-7, 1.1e-7, 9.7e-7).
TEST(GptOss, TwentyTrainingStepsTrackTheFloat64Reference) {
  const testing::ReferenceCase ref("train_gpt_oss_tiny");
  const auto model = models::gpt_oss::to_config(tiny()).build();
  const testing::TrainingDrift drift = testing::expect_training_tracks_reference(*model, ref, 1e-4, 1e-4, 1e-4);
  std::printf("drift from float64: loss %.2e, gradient norm %.2e, final weights %.2e\n", drift.loss, drift.grad_norm,
              drift.weight);
}

}  // namespace gpt_oss_test
}  // namespace titan
