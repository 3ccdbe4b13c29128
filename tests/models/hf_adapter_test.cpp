// The Hugging Face adapters on their own: published config.json files of
// Llama 3.1/3.2, Qwen3 and Qwen3-30B-A3B give exactly titan's flavors (whose numbers come
// from Meta's params.json and the Qwen releases), config.json text round-trips,
// names map one-to-one, the q/k permutation matches transformers' conversion
// script, and bad configs are errors naming the file and the value.
#include <gtest/gtest.h>

#include <set>

#include "titan/core/error.h"
#include "titan/models/decoder_config_diff.h"
#include "titan/models/hf_adapter.h"
#include "titan/models/model_spec.h"

namespace titan {
namespace {

// As published on the Hugging Face hub (meta-llama/Llama-3.1-8B, meta-llama/Llama-3.2-1B,
// Qwen/Qwen3-0.6B, Qwen/Qwen3-8B), keys titan does not use included.
const char* kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";
const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";
const char* kQwen3_0_6B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
  "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
  "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";
const char* kQwen3_8B = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960, "model_type": "qwen3",
  "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 151936})";

// Qwen/Qwen3-30B-A3B's config.json.
const char* kQwen3_30B_A3B = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960,
  "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
  "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

struct Published {
  const char* json;
  const char* model;
  const char* flavor;
};

TEST(HfAdapter, PublishedConfigsAreTitansFlavors) {
  for (const Published& p : {Published{kLlama31_8B, "llama3", "8B"}, Published{kLlama32_1B, "llama3", "1B"},
                             Published{kQwen3_0_6B, "qwen3", "0.6B"}, Published{kQwen3_8B, "qwen3", "8B"},
                             Published{kQwen3_30B_A3B, "qwen3_moe", "30B-A3B"}}) {
    SCOPED_TRACE(p.flavor);
    const models::HfConfig hf = models::parse_hf_config(p.json, "config.json");
    EXPECT_EQ(models::hf_family(hf).model, p.model);
    const models::DecoderConfig config = models::decoder_config_from_hf(hf);
    const auto differences = models::decoder_config_differences(config, models::model_config(p.model, p.flavor));
    EXPECT_TRUE(differences.empty()) << fmt::format("{}", fmt::join(differences, "; "));
    EXPECT_EQ(models::matching_flavor(p.model, config), p.flavor);
    EXPECT_EQ(config.max_seq_len, models::model_config(p.model, p.flavor).max_seq_len);
    EXPECT_EQ(hf.torch_dtype, "bfloat16");
  }
}

TEST(HfAdapter, ConfigJsonRoundTripsEveryFlavor) {
  for (const std::string& model : models::model_names()) {
    for (const std::string& flavor : models::model_spec(model).flavors) {
      SCOPED_TRACE(model + " " + flavor);
      const models::DecoderConfig config = models::model_config(model, flavor);
      const models::HfConfig hf = models::hf_config_from_decoder(model, config, DType::bf16);
      const std::string text = models::hf_config_json(hf);
      const models::HfConfig parsed = models::parse_hf_config(text, "written.json");
      const models::DecoderConfig back = models::decoder_config_from_hf(parsed);
      EXPECT_TRUE(models::decoder_config_differences(back, config).empty()) << text;
      EXPECT_EQ(back.max_seq_len, config.max_seq_len);
      EXPECT_EQ(models::matching_flavor(model, back), flavor);
      EXPECT_EQ(models::hf_config_json(parsed), text);
    }
  }
}

TEST(HfAdapter, AbsentKeysTakeTransformersDefaults) {
  const models::HfConfig llama = models::parse_hf_config(R"({"model_type": "llama"})", "c.json");
  EXPECT_EQ(llama.architecture, "LlamaForCausalLM");
  const models::DecoderConfig config = models::decoder_config_from_hf(llama);
  EXPECT_EQ(config.dim(), 4096);
  EXPECT_EQ(config.layers.front().feed_forward.hidden_dim, 11008);
  EXPECT_EQ(config.layers.front().attention.kv_heads(), 32);
  EXPECT_EQ(config.vocab_size, 32000);
  EXPECT_EQ(config.max_seq_len, 2048);
  EXPECT_EQ(config.rope_theta, 10000.0);
  EXPECT_FALSE(config.tie_embeddings);
  const models::HfConfig qwen = models::parse_hf_config(R"({"architectures": ["Qwen3ForCausalLM"]})", "c.json");
  EXPECT_EQ(models::decoder_config_from_hf(qwen).layers.front().attention.head_size(), 128);
  EXPECT_TRUE(models::decoder_config_from_hf(qwen).layers.front().attention.qk_norm);
}

void expect_error(const std::string& json, std::initializer_list<std::string> fragments) {
  try {
    models::parse_hf_config(json, "some/dir/config.json");
    ADD_FAILURE() << "no error for " << json;
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("some/dir/config.json"), std::string::npos) << message;
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

TEST(HfAdapter, BadConfigsNameFileAndValue) {
  expect_error(R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral"})",
               {"unsupported architecture 'MistralForCausalLM'", "LlamaForCausalLM, Qwen3ForCausalLM"});
  expect_error(R"({"model_type": "gemma"})", {"unsupported model_type 'gemma'"});
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "model_type": "qwen3"})", {"unsupported model_type 'qwen3'"});
  expect_error(R"({"model_type": "qwen3", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})",
               {"rope_scaling type 'yarn'"});
  expect_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})",
               {"rope_scaling type 'dynamic'"});
  expect_error(R"({"model_type": "llama", "attention_bias": true})", {"attention_bias"});
  expect_error(R"({"model_type": "qwen3", "use_sliding_window": true})", {"use_sliding_window"});
  expect_error(R"({"model_type": "llama", "hidden_act": "gelu"})", {"hidden_act 'gelu'"});
  expect_error(R"({"model_type": "llama", "hidden_size": "4096"})", {"'hidden_size' must be an integer"});
  expect_error(R"({"model_type": "llama", "num_hidden_layers": -2})", {"'num_hidden_layers' = -2"});
  expect_error(R"({"model_type": "llama", "num_key_value_heads": 5})", {"not a multiple"});
  expect_error(R"({"model_type": "llama", "torch_dtype": "float64"})", {"torch_dtype 'float64'"});
  expect_error(R"({"hidden_size": 8})", {"neither 'architectures' nor 'model_type'"});
  expect_error(R"({"model_type": "llama",)", {"not valid JSON"});
  // Mixture-of-experts settings titan cannot honour.
  expect_error(R"({"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 9})",
               {"'num_experts_per_tok' = 9 exceeds 'num_experts' = 8"});
  expect_error(R"({"model_type": "qwen3_moe", "shared_expert_intermediate_size": 512})",
               {"'shared_expert_intermediate_size' = 512 is not supported"});
  expect_error(R"({"model_type": "qwen3_moe", "num_hidden_layers": 4, "mlp_only_layers": [7]})", {"mlp_only_layers"});
  expect_error(R"({"model_type": "qwen3_moe", "decoder_sparse_step": 0})", {"'decoder_sparse_step' = 0"});
  expect_error(R"([1, 2])", {"not a JSON object"});
}

TEST(HfAdapter, NamesMapOneToOne) {
  EXPECT_EQ(models::hf_tensor_name("tok_embeddings.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(models::hf_tensor_name("layers.3.attention.wq.weight"), "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(models::hf_tensor_name("layers.12.attention.k_norm.weight"), "model.layers.12.self_attn.k_norm.weight");
  EXPECT_EQ(models::hf_tensor_name("layers.0.feed_forward.w1.weight"), "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(models::hf_tensor_name("layers.0.feed_forward.w2.weight"), "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(models::hf_tensor_name("layers.0.feed_forward.w3.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(models::hf_tensor_name("layers.5.attention_norm.weight"), "model.layers.5.input_layernorm.weight");
  EXPECT_EQ(models::hf_tensor_name("layers.5.ffn_norm.weight"), "model.layers.5.post_attention_layernorm.weight");
  EXPECT_EQ(models::hf_tensor_name("norm.weight"), "model.norm.weight");
  EXPECT_EQ(models::hf_tensor_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(models::titan_tensor_name("model.layers.03.self_attn.q_proj.weight"), "");
  EXPECT_EQ(models::titan_tensor_name("model.layers.3.self_attn.q_proj.bias"), "");
  EXPECT_EQ(models::titan_tensor_name("model.layers..self_attn.q_proj.weight"), "");
  for (const char* model : {"llama3", "qwen3"}) {
    auto decoder = models::model_config(model, "debugmodel").build(Device::meta());
    std::set<std::string> seen;
    for (auto& [name, parameter] : decoder->named_parameters()) {
      const std::string hf = models::hf_tensor_name(name);
      ASSERT_FALSE(hf.empty()) << name;
      EXPECT_TRUE(seen.insert(hf).second) << hf;
      EXPECT_EQ(models::titan_tensor_name(hf), name);
    }
  }
}

// transformers' convert_llama_weights_to_hf.py:
//   w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)
// written here with Tensor views, apart from the adapter's row copies.
Tensor hf_script_permute(const Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0), cols = w.size(1);
  return w.view({heads, rows / heads / 2, 2, cols}).transpose(1, 2).contiguous().view({rows, cols});
}

TEST(HfAdapter, QkPermutationIsTransformersConversion) {
  models::DecoderConfig config = models::model_config("llama3", "debugmodel");
  config.edit_layers([](nn::TransformerBlockConfig& layer) { layer.attention.n_kv_heads = 4; });
  const auto& a = config.layers.front().attention;
  for (const auto& [name, heads] : std::vector<std::pair<std::string, int64_t>>{
           {"layers.1.attention.wq.weight", a.n_heads}, {"layers.1.attention.wk.weight", a.kv_heads()}}) {
    std::vector<float> values(static_cast<size_t>(heads * a.head_size() * a.dim));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
    const Tensor w = Tensor::from_vector(values, {heads * a.head_size(), a.dim});
    const Tensor hf = models::to_hf_layout(name, w, config);
    EXPECT_EQ(hf.to_floats(), hf_script_permute(w, heads).to_floats()) << name;
    EXPECT_EQ(models::from_hf_layout(name, hf, config).to_floats(), values) << name;
  }
  // Not rotated, or already half-rotation: untouched.
  const Tensor v = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  EXPECT_TRUE(models::to_hf_layout("layers.0.attention.wv.weight", v, config).is_same(v));
  const models::DecoderConfig qwen = models::model_config("qwen3", "debugmodel");
  EXPECT_TRUE(models::to_hf_layout("layers.0.attention.wq.weight", v, qwen).is_same(v));
}

TEST(HfAdapter, TitanModelsWithoutHfEquivalentAreRefused) {
  models::DecoderConfig config = models::model_config("qwen3", "debugmodel");
  config.rope_scaling = {8.0, 1.0, 4.0, 8192};
  EXPECT_THROW(models::hf_config_from_decoder("qwen3", config, DType::f32), Error);
  config = models::model_config("llama3", "debugmodel");
  config.edit_layers([](nn::TransformerBlockConfig& layer) { layer.attention.rope_style = ops::RopeStyle::half; });
  EXPECT_THROW(models::hf_config_from_decoder("llama3", config, DType::f32), Error);
  EXPECT_THROW(models::hf_config_from_decoder("llama3", models::model_config("llama3", "debugmodel"), DType::i32),
               Error);
}

}  // namespace
}  // namespace titan
