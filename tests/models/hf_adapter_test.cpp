// The Hugging Face adapters on their own: published config.json files of
// Llama 3.1/3.2, Qwen3, Qwen3-30B-A3B, Mistral 7B, Qwen2.5, Gemma 2 and 3,
// OLMo 2 and Phi-3 give exactly titan's flavors (whose numbers come from the
// releases) with the features each family has, config.json text round-trips,
// names map one-to-one per family, the q/k permutation matches transformers'
// conversion script, and bad configs are errors naming the file, key and value.
#include <gtest/gtest.h>

#include <fmt/ranges.h>
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "data/peer_support.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/core/error.h"
#include "titan/models/decoder_config_diff.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/lora_plan.h"
#include "titan/models/model_spec.h"

namespace titan {
namespace hf_adapter_test {

// The keys that give the weights their shapes are required (a class default
// such as transformers' hidden_size 4096 would build another model); tests of
// other keys get small ones added where their JSON has none. Text that is not
// a JSON object passes through unchanged.
std::string with_shape_keys(const std::string& json) {
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return json;
  const bool moe = config.value("model_type", std::string()) == "qwen3_moe";
  for (const auto& [key, value] : std::vector<std::pair<std::string, int>>{{"hidden_size", 128},
                                                                           {"intermediate_size", 128},
                                                                           {"num_hidden_layers", 2},
                                                                           {"num_attention_heads", 32},
                                                                           {"vocab_size", 100}}) {
    if (!config.contains(key)) config[key] = value;
  }
  if (moe) {
    for (const auto& [key, value] : std::vector<std::pair<std::string, int>>{
             {"num_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32}}) {
      if (!config.contains(key)) config[key] = value;
    }
  }
  return config.dump();
}

models::HfConfig parse_with_shape(const std::string& json, const std::string& source) {
  return models::parse_hf_config(with_shape_keys(json), source);
}

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

// As published (mistralai/Mistral-7B-v0.1, Qwen/Qwen2.5-0.5B, google/gemma-2-2b,
// google/gemma-3-1b-it, allenai/OLMo-2-0425-1B, microsoft/Phi-3-mini-4k-instruct).
const char* kMistral7B = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0", "use_cache": true, "vocab_size": 32000})";
const char* kQwen25_0_5B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2",
  "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1", "use_cache": true, "use_mrope": false, "use_sliding_window": false,
  "vocab_size": 151936})";
const char* kGemma2_2B = R"({
  "architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
  "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "initializer_range": 0.02,
  "intermediate_size": 9216, "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8,
  "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0, "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "torch_dtype": "float32",
  "transformers_version": "4.42.4", "use_cache": true, "vocab_size": 256000})";
const char* kGemma3_1B = R"({
  "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 106],
  "final_logit_softcapping": null, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
  "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768,
  "model_type": "gemma3_text", "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
  "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
  "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144})";
const char* kOlmo2_1B = R"({
  "architectures": ["Olmo2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": null,
  "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "olmo2", "num_attention_heads": 16,
  "num_hidden_layers": 16, "num_key_value_heads": 16, "pad_token_id": 100277, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 500000, "tie_word_embeddings": false, "torch_dtype": "float32",
  "transformers_version": "4.48.3", "use_cache": true, "vocab_size": 100352})";
const char* kPhi3Mini = R"({
  "_name_or_path": "Phi-3-mini-4k-instruct", "architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
               "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
  "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
  "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
  "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": true, "vocab_size": 32064})";

// The long-context RoPE of published configs, keys titan does not use dropped:
// google/gemma-3-4b-it's text model (linear 8 on global layers), Qwen2.5-7B-Instruct
// with the YaRN block its model card adds, Phi-3.5-mini-instruct's longrope
// (48 short and 48 long factors; here values of its range, not its own), and
// Phi-4-mini's partial rotary (0.75 of 128) with longrope.
const char* kGemma3_4B = R"({
  "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": false,
  "attn_logit_softcapping": null, "final_logit_softcapping": null, "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2560, "intermediate_size": 10240,
  "max_position_embeddings": 131072, "num_attention_heads": 8, "num_hidden_layers": 34, "num_key_value_heads": 4,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
  "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "rope_theta": 1000000.0, "sliding_window": 1024,
  "sliding_window_pattern": 6, "torch_dtype": "bfloat16", "vocab_size": 262208})";
const char* kQwen25_7B_Yarn = R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0, "hidden_act": "silu",
  "hidden_size": 3584, "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
  "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
  "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"},
  "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "use_sliding_window": false, "vocab_size": 152064})";

// A Phi-3 config with longrope factor lists of `pairs` entries (short around 1, long growing to ~40).
std::string phi3_longrope(const std::string& shape, int64_t pairs) {
  std::vector<double> short_factor, long_factor;
  for (int64_t i = 0; i < pairs; ++i) {
    short_factor.push_back(1.0 + 0.05 * static_cast<double>(i % 7));
    long_factor.push_back(1.0 + 0.8 * static_cast<double>(i));
  }
  return fmt::format(R"({{"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", {},
    "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
    "rope_scaling": {{"long_factor": [{}], "short_factor": [{}], "type": "longrope"}}, "rope_theta": 10000.0,
    "torch_dtype": "bfloat16"}})",
                     shape, fmt::join(long_factor, ", "), fmt::join(short_factor, ", "));
}
const std::string kPhi35Mini = phi3_longrope(
    R"("hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "sliding_window": 262144, "vocab_size": 32064, "tie_word_embeddings": false)",
    48);
const std::string kPhi4Mini = phi3_longrope(
    R"("hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 24, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "sliding_window": 262144, "vocab_size": 200064, "tie_word_embeddings": true,
    "partial_rotary_factor": 0.75)",
    48);

struct Published {
  const char* json;
  const char* model;
  const char* flavor;
  const char* dtype = "bfloat16";
};

TEST(HfAdapter, PublishedConfigsAreTitansFlavors) {
  for (const Published& p : {Published{kLlama31_8B, "llama3", "8B"}, Published{kLlama32_1B, "llama3", "1B"},
                             Published{kQwen3_0_6B, "qwen3", "0.6B"}, Published{kQwen3_8B, "qwen3", "8B"},
                             Published{kQwen3_30B_A3B, "qwen3_moe", "30B-A3B"}, Published{kMistral7B, "mistral", "7B"},
                             Published{kQwen25_0_5B, "qwen2", "0.5B"}, Published{kGemma2_2B, "gemma2", "2B", "float32"},
                             Published{kGemma3_1B, "gemma3", "1B"}, Published{kOlmo2_1B, "olmo2", "1B", "float32"},
                             Published{kPhi3Mini, "phi3", "3.8B"}}) {
    SCOPED_TRACE(fmt::format("{} {}", p.model, p.flavor));
    const models::HfConfig hf = models::parse_hf_config(p.json, "config.json");
    EXPECT_EQ(models::hf_family(hf).model, p.model);
    const models::DecoderConfig config = models::decoder_config_from_hf(hf);
    const auto differences = models::decoder_config_differences(config, models::model_config(p.model, p.flavor));
    EXPECT_TRUE(differences.empty()) << fmt::format("{}", fmt::join(differences, "; "));
    EXPECT_EQ(models::matching_flavor(p.model, config), p.flavor);
    EXPECT_EQ(config.max_seq_len, models::model_config(p.model, p.flavor).max_seq_len);
    EXPECT_EQ(hf.torch_dtype, p.dtype);
  }
}

// Layer i's window, for each layer.
std::vector<int64_t> windows(const models::DecoderConfig& config) {
  std::vector<int64_t> result;
  for (const auto& layer : config.layers) result.push_back(layer.attention.sliding_window);
  return result;
}

// The features each published release has, field by field (numbers from its config.json; the rules from
// transformers' modeling code: which layers slide, where the norms sit, what the norms and scores scale by).
TEST(HfAdapter, PublishedConfigsHaveTheirFamilysFeatures) {
  using nn::FeedForwardActivation;
  const models::DecoderConfig mistral = models::decoder_config_from_hf(models::parse_hf_config(kMistral7B, "c"));
  EXPECT_EQ(windows(mistral), std::vector<int64_t>(32, 4096));
  for (const auto& layer : mistral.layers) {
    EXPECT_TRUE(layer.pre_norms && !layer.post_norms);
    EXPECT_EQ(layer.norm_weight_offset, 0.0);
    EXPECT_FALSE(layer.attention.qkv_bias || layer.attention.qk_norm || layer.attention.local_rope);
    EXPECT_EQ(layer.attention.rope_style, ops::RopeStyle::half);
    EXPECT_EQ(layer.attention.scale_dim, 0.0);
    EXPECT_EQ(layer.feed_forward.activation, FeedForwardActivation::silu);
  }
  EXPECT_EQ(mistral.embedding_scale, 0.0);
  EXPECT_EQ(mistral.loss.softcap, 0.0f);

  const models::DecoderConfig qwen2 = models::decoder_config_from_hf(models::parse_hf_config(kQwen25_0_5B, "c"));
  EXPECT_EQ(windows(qwen2), std::vector<int64_t>(24, 0));  // use_sliding_window false: its window is inactive
  EXPECT_TRUE(qwen2.layers.front().attention.qkv_bias);
  EXPECT_FALSE(qwen2.layers.front().attention.qk_norm);
  EXPECT_EQ(qwen2.layers.front().attention.head_size(), 64);
  EXPECT_TRUE(qwen2.tie_embeddings);

  const models::DecoderConfig gemma2 = models::decoder_config_from_hf(models::parse_hf_config(kGemma2_2B, "c"));
  for (int64_t i = 0; i < gemma2.n_layers(); ++i) {
    const auto& layer = gemma2.layers[static_cast<size_t>(i)];
    EXPECT_EQ(layer.attention.sliding_window, i % 2 == 0 ? 4096 : 0) << i;
    EXPECT_TRUE(layer.pre_norms && layer.post_norms);
    EXPECT_EQ(layer.norm_weight_offset, 1.0);
    EXPECT_EQ(layer.attention.scale_dim, 256.0);
    EXPECT_EQ(layer.attention.logit_softcap, 50.0f);
    EXPECT_EQ(layer.attention.head_size(), 256);
    EXPECT_FALSE(layer.attention.qk_norm || layer.attention.local_rope || layer.attention.qkv_bias);
    EXPECT_EQ(layer.feed_forward.activation, FeedForwardActivation::gelu_tanh);
  }
  EXPECT_EQ(gemma2.embedding_scale, std::sqrt(2304.0));
  EXPECT_EQ(gemma2.loss.softcap, 30.0f);
  EXPECT_EQ(gemma2.local_rope_theta, 0.0);
  EXPECT_TRUE(gemma2.tie_embeddings);  // absent from the file: Gemma2Config's default

  const models::DecoderConfig gemma3 = models::decoder_config_from_hf(models::parse_hf_config(kGemma3_1B, "c"));
  for (int64_t i = 0; i < gemma3.n_layers(); ++i) {
    const auto& layer = gemma3.layers[static_cast<size_t>(i)];
    const bool global = (i + 1) % 6 == 0;  // layers 5, 11, 17, 23
    EXPECT_EQ(layer.attention.sliding_window, global ? 0 : 512) << i;
    EXPECT_EQ(layer.attention.local_rope, !global) << i;
    EXPECT_TRUE(layer.attention.qk_norm && !layer.attention.qk_norm_whole_projection);
    EXPECT_EQ(layer.attention.qk_norm_weight_offset, 1.0);
    EXPECT_EQ(layer.attention.logit_softcap, 0.0f);  // null in the file
    EXPECT_EQ(layer.attention.scale_dim, 256.0);
    EXPECT_EQ(layer.norm_weight_offset, 1.0);
    EXPECT_TRUE(layer.pre_norms && layer.post_norms);
    EXPECT_EQ(layer.feed_forward.activation, FeedForwardActivation::gelu_tanh);
  }
  EXPECT_EQ(gemma3.rope_theta, 1e6);
  EXPECT_EQ(gemma3.local_rope_theta, 10000.0);
  EXPECT_EQ(gemma3.loss.softcap, 0.0f);
  EXPECT_EQ(gemma3.embedding_scale, std::sqrt(1152.0));

  const models::DecoderConfig olmo2 = models::decoder_config_from_hf(models::parse_hf_config(kOlmo2_1B, "c"));
  for (const auto& layer : olmo2.layers) {
    EXPECT_TRUE(!layer.pre_norms && layer.post_norms);
    EXPECT_TRUE(layer.attention.qk_norm && layer.attention.qk_norm_whole_projection);
    EXPECT_EQ(layer.attention.qk_norm_weight_offset, 0.0);
    EXPECT_EQ(layer.attention.sliding_window, 0);
    EXPECT_EQ(layer.feed_forward.activation, FeedForwardActivation::silu);
  }
  EXPECT_EQ(olmo2.rope_theta, 500000.0);

  const models::DecoderConfig phi3 = models::decoder_config_from_hf(models::parse_hf_config(kPhi3Mini, "c"));
  EXPECT_EQ(windows(phi3), std::vector<int64_t>(32, 2047));
  EXPECT_FALSE(phi3.layers.front().attention.qkv_bias);
  EXPECT_EQ(phi3.layers.front().attention.head_size(), 96);
}

// Sliding windows: null means none; layer_types overrides the family's rule;
// Gemma 3's pattern is a parameter.
TEST(HfAdapter, SlidingLayersFollowRuleOrLayerTypes) {
  auto parse = [](const std::string& json) { return models::decoder_config_from_hf(parse_with_shape(json, "c")); };
  EXPECT_EQ(windows(parse(R"({"model_type": "mistral", "num_hidden_layers": 3, "sliding_window": null})")),
            (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(windows(parse(R"({"model_type": "mistral", "num_hidden_layers": 3})")),
            (std::vector<int64_t>{4096, 4096, 4096}));  // MistralConfig's default window
  EXPECT_EQ(windows(parse(R"({"model_type": "phi3", "num_hidden_layers": 2})")), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(windows(parse(R"({"model_type": "mistral", "num_hidden_layers": 3, "sliding_window": 8,
      "layer_types": ["full_attention", "sliding_attention", "full_attention"]})")),
            (std::vector<int64_t>{0, 8, 0}));
  const models::DecoderConfig gemma3 = parse(
      R"({"model_type": "gemma3_text", "num_hidden_layers": 4, "sliding_window": 16, "sliding_window_pattern": 3})");
  EXPECT_EQ(windows(gemma3), (std::vector<int64_t>{16, 16, 0, 16}));
  EXPECT_TRUE(gemma3.layers[1].attention.local_rope);
  EXPECT_FALSE(gemma3.layers[2].attention.local_rope);
  const models::DecoderConfig gemma2 = parse(R"({"model_type": "gemma2", "num_hidden_layers": 3, "sliding_window": 4,
      "layer_types": ["full_attention", "full_attention", "sliding_attention"]})");
  EXPECT_EQ(windows(gemma2), (std::vector<int64_t>{0, 0, 4}));
  // Qwen 2's window keys without use_sliding_window are inactive, as in transformers.
  EXPECT_EQ(windows(parse(R"({"model_type": "qwen2", "num_hidden_layers": 2, "sliding_window": 4,
      "max_window_layers": 0, "use_sliding_window": false})")),
            (std::vector<int64_t>{0, 0}));
}

// Written config.json text parses back to the HfConfig it was written from, for
// every flavor and for published files (whose extra keys are dropped).
TEST(HfAdapter, WrittenConfigParsesBackEqual) {
  for (const char* json :
       {kLlama31_8B, kQwen3_30B_A3B, kMistral7B, kQwen25_0_5B, kGemma2_2B, kGemma3_1B, kOlmo2_1B, kPhi3Mini}) {
    const models::HfConfig hf = models::parse_hf_config(json, "c");
    SCOPED_TRACE(hf.architecture);
    EXPECT_TRUE(models::parse_hf_config(models::hf_config_json(hf), "w") == hf);
    // And through titan's model: the same config.json (the dtype aside).
    const models::HfConfig back =
        models::hf_config_from_decoder(models::hf_family(hf).model, models::decoder_config_from_hf(hf), DType::f32);
    models::HfConfig expected = hf;
    expected.torch_dtype = "float32";
    EXPECT_EQ(models::hf_config_json(back), models::hf_config_json(expected));
  }
}

TEST(HfAdapter, ConfigJsonRoundTripsEveryFlavor) {
  for (const std::string& model : models::model_names()) {
    if (models::model_spec(model).hf_family == nullptr) continue;  // no Hugging Face adapter
    for (const std::string& flavor : models::model_spec(model).flavors) {
      SCOPED_TRACE(model + " " + flavor);
      const models::DecoderConfig config = models::model_config(model, flavor);
      // TorchTitan's DeepSeek flavors but 671B score experts with softmax,
      // which DeepseekV3ForCausalLM cannot say: refused, naming why.
      const bool softmax_experts = std::any_of(config.layers.begin(), config.layers.end(), [](const auto& layer) {
        return layer.mla && layer.moe && layer.moe->score == nn::RouterScore::softmax;
      });
      if (softmax_experts) {
        try {
          models::hf_config_from_decoder(model, config, DType::bf16);
          ADD_FAILURE() << "no error";
        } catch (const Error& error) {
          EXPECT_NE(std::string(error.what()).find("softmax"), std::string::npos) << error.what();
        }
        continue;
      }
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

// Keys that do not shape the weights take the config class's default when absent, as in transformers.
TEST(HfAdapter, AbsentOptionalKeysTakeTransformersDefaults) {
  const models::HfConfig llama = parse_with_shape(R"({"model_type": "llama"})", "c.json");
  EXPECT_EQ(llama.architecture, "LlamaForCausalLM");
  const models::DecoderConfig config = models::decoder_config_from_hf(llama);
  EXPECT_EQ(config.layers.front().attention.kv_heads(), 32);  // num_key_value_heads: num_attention_heads
  EXPECT_EQ(config.max_seq_len, 2048);
  EXPECT_EQ(config.rope_theta, 10000.0);
  EXPECT_FALSE(config.tie_embeddings);
  const models::HfConfig qwen = parse_with_shape(R"({"architectures": ["Qwen3ForCausalLM"]})", "c.json");
  EXPECT_EQ(models::decoder_config_from_hf(qwen).layers.front().attention.head_size(), 128);
  EXPECT_TRUE(models::decoder_config_from_hf(qwen).layers.front().attention.qk_norm);
  // Each new family's config class defaults.
  const models::HfConfig gemma2 = parse_with_shape(R"({"model_type": "gemma2"})", "c.json");
  EXPECT_EQ(gemma2.sliding_window, 4096);
  EXPECT_EQ(gemma2.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(gemma2.attn_logit_softcapping, 50.0);
  EXPECT_EQ(gemma2.final_logit_softcapping, 30.0);
  EXPECT_TRUE(gemma2.tie_word_embeddings);
  const models::HfConfig gemma3 = parse_with_shape(R"({"model_type": "gemma3_text"})", "c.json");
  EXPECT_EQ(gemma3.architecture, "Gemma3ForCausalLM");
  EXPECT_EQ(gemma3.sliding_window_pattern, 6);
  EXPECT_EQ(gemma3.rope_theta, 1e6);
  EXPECT_EQ(gemma3.rope_local_base_freq, 10000.0);
  EXPECT_EQ(gemma3.attn_logit_softcapping, 0.0);
  const models::HfConfig olmo2 = parse_with_shape(R"({"model_type": "olmo2"})", "c.json");
  EXPECT_EQ(olmo2.rms_norm_eps, 1e-5);
  const models::HfConfig phi3 = parse_with_shape(R"({"model_type": "phi3"})", "c.json");
  EXPECT_EQ(phi3.sliding_window, 0);
  const models::HfConfig mistral = parse_with_shape(R"({"model_type": "mistral"})", "c.json");
  EXPECT_EQ(mistral.max_position_embeddings, 131072);
  EXPECT_EQ(mistral.num_key_value_heads, 8);
}

// The keys that shape the weights have no default: each missing (or null) one
// is an error naming it, never transformers' class default (4096 for
// hidden_size), which would build another model and fail later on a tensor.
TEST(HfAdapter, MissingShapeKeysAreErrorsNamingTheKey) {
  const nlohmann::json full = nlohmann::json::parse(with_shape_keys(R"({"model_type": "qwen3_moe"})"));
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                          "num_experts", "num_experts_per_tok", "moe_intermediate_size"}) {
    SCOPED_TRACE(key);
    nlohmann::json missing = full;
    missing.erase(key);
    try {
      models::parse_hf_config(missing.dump(), "some/dir/config.json");
      ADD_FAILURE() << "no error without " << key;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(fmt::format("some/dir/config.json: required key '{}' is missing", key)),
                std::string::npos)
          << error.what();
    }
    missing[key] = nullptr;
    EXPECT_THROW(models::parse_hf_config(missing.dump(), "some/dir/config.json"), Error);
  }
  EXPECT_NO_THROW(models::parse_hf_config(full.dump(), "some/dir/config.json"));
}

void expect_error(const std::string& json, std::initializer_list<std::string> fragments) {
  try {
    parse_with_shape(json, "some/dir/config.json");
    ADD_FAILURE() << "no error for " << json;
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("some/dir/config.json"), std::string::npos) << message;
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

TEST(HfAdapter, BadConfigsNameFileAndValue) {
  expect_error(R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral"})",
               {"unsupported architecture 'MixtralForCausalLM'", "LlamaForCausalLM, Qwen3ForCausalLM",
                "Gemma3ForCausalLM", "Phi3ForCausalLM"});
  expect_error(R"({"model_type": "gemma"})", {"unsupported model_type 'gemma'"});
  expect_error(R"({"architectures": ["LlamaForCausalLM"], "model_type": "qwen3"})", {"unsupported model_type 'qwen3'"});
  expect_error(R"({"model_type": "qwen3", "rope_scaling": {"rope_type": "ntk", "factor": 4.0}})",
               {"rope_scaling type 'ntk'"});
  expect_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "dynamic"}})",
               {"rope_scaling of type dynamic needs 'factor'"});
  expect_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "alpha": 1.0}})",
               {"'rope_scaling.alpha' is not supported for rope_type 'yarn'", "beta_fast"});
  expect_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "linear", "factor": 4.0, "beta_fast": 8}})",
               {"'rope_scaling.beta_fast' is not supported for rope_type 'linear'"});
  expect_error(R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "type": "linear", "factor": 4.0}})",
               {"rope_type 'yarn' and type 'linear'"});
  expect_error(R"({"model_type": "llama", "max_position_embeddings": 4096,
                   "rope_scaling": {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}})",
               {"'rope_scaling.original_max_position_embeddings' = 2048 differs from max_position_embeddings 4096"});
  expect_error(R"({"model_type": "llama", "rope_scaling": {"type": "yarn", "factor": 4.0, "attention_factor": 0}})",
               {"'attention_factor' must be a positive number"});
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

// What the six newer families' configs may say that titan does not implement:
// each an error naming the key and the value.
TEST(HfAdapter, UnsupportedFeaturesOfNewFamiliesNameKeyAndValue) {
  for (const char* type : {"mistral", "qwen2", "gemma2", "gemma3_text", "olmo2", "phi3"}) {
    SCOPED_TRACE(type);
    const auto with = [&](const std::string& entries) {
      return fmt::format(R"({{"model_type": "{}", "num_hidden_layers": 2, {}}})", type, entries);
    };
    expect_error(with(R"("attention_dropout": 0.1)"), {"'attention_dropout' = 0.1"});
    expect_error(with(R"("resid_pdrop": 0.2)"), {"'resid_pdrop' = 0.2"});
    expect_error(with(R"("embd_pdrop": 0.25)"), {"'embd_pdrop' = 0.25"});
    expect_error(with(R"("mlp_bias": true)"), {"'mlp_bias' = true"});
    if (std::string(type) != "phi3") {
      expect_error(with(R"("partial_rotary_factor": 0.5)"), {"'partial_rotary_factor' = 0.5 is not supported"});
    }
    expect_error(with(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0, "scale": 2})"),
                 {"'rope_scaling.scale' is not supported"});
    if (std::string(type) != "qwen2") expect_error(with(R"("attention_bias": true)"), {"'attention_bias' = true"});
  }
  // Qwen 2's biases always exist; its window is not supported.
  EXPECT_NO_THROW(parse_with_shape(R"({"model_type": "qwen2", "attention_bias": true})", "c"));
  expect_error(R"({"model_type": "qwen2", "use_sliding_window": true})", {"'use_sliding_window' = true"});
  // Activations: Gemma's GeGLU under either key, SwiGLU elsewhere.
  expect_error(R"({"model_type": "gemma2", "hidden_activation": "gelu"})", {"hidden_activation 'gelu'"});
  expect_error(R"({"model_type": "gemma3_text", "hidden_act": "silu"})", {"hidden_act 'silu'"});
  expect_error(R"({"model_type": "olmo2", "hidden_act": "gelu_pytorch_tanh"})", {"hidden_act 'gelu_pytorch_tanh'"});
  expect_error(R"({"model_type": "phi3", "hidden_act": "gelu"})", {"hidden_act 'gelu'"});
  // longrope needs both factor lists, of rotary_dim / 2 numbers; Phi-3's oldest name for it ("su") is refused.
  expect_error(R"({"model_type": "phi3", "rope_scaling": {"type": "longrope", "long_factor": [1.0]}})",
               {"rope_scaling of type longrope needs 'short_factor'"});
  expect_error(R"({"model_type": "phi3", "hidden_size": 64, "num_attention_heads": 4,
                   "rope_scaling": {"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}})",
               {"short_factor and long_factor must hold rotary_dim / 2 = 8 numbers each, got 1 and 1"});
  expect_error(R"({"model_type": "phi3", "rope_scaling": {"type": "longrope", "long_factor": [1.0, "x"],
                   "short_factor": [1.0]}})",
               {"'rope_scaling.long_factor' holds \"x\""});
  expect_error(R"({"model_type": "phi3", "rope_scaling": {"type": "su"}})", {"rope_scaling type 'su'"});
  expect_error(R"({"model_type": "phi3", "hidden_size": 64, "num_attention_heads": 4, "partial_rotary_factor": 0.35})",
               {"partial_rotary_factor 0.35 rotates 5 of head_dim 16"});
  expect_error(R"({"model_type": "gemma3_text", "use_bidirectional_attention": true})",
               {"'use_bidirectional_attention' = true"});
  // layer_types: one known entry per layer.
  expect_error(R"({"model_type": "gemma2", "num_hidden_layers": 3, "layer_types": ["full_attention"]})",
               {"'layer_types' must list one entry per layer (3)"});
  expect_error(
      R"({"model_type": "mistral", "num_hidden_layers": 2, "layer_types": ["full_attention", "chunked_attention"]})",
      {"'layer_types' holds \"chunked_attention\" at layer 1"});
  expect_error(R"({"model_type": "mistral", "sliding_window": 0})", {"'sliding_window' = 0"});
  expect_error(R"({"model_type": "gemma2", "attn_logit_softcapping": -1.0})", {"'attn_logit_softcapping'", "-1.0"});
  expect_error(R"({"model_type": "gemma3_text", "sliding_window_pattern": 0})", {"'sliding_window_pattern' = 0"});
  expect_error(R"({"model_type": "qwen2", "rope_parameters": {"rope_type": "ntk", "factor": 4.0}})",
               {"rope_parameters type 'ntk'"});
  expect_error(R"({"model_type": "gemma3_text", "rope_parameters": {"full_attention": {"rope_theta": 1e6},
      "sliding_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e4}}})",
               {"'rope_parameters.sliding_attention' scales its RoPE"});
  expect_error(R"({"model_type": "llama", "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.75}})",
               {"'rope_parameters.partial_rotary_factor' = 0.75 is not supported"});
}

// The published long-context configs titan used to refuse: each rope_type with
// the parameters transformers derives, the tables titan's model gets, and
// config.json written back parsing to the same config, also through titan's model.
TEST(HfAdapter, LongContextRopeOfPublishedConfigs) {
  using ops::RopeScalingType;
  const models::HfConfig gemma3 = models::parse_hf_config(kGemma3_4B, "c");
  EXPECT_EQ(gemma3.rope_scaling.type, RopeScalingType::linear);
  EXPECT_EQ(gemma3.rope_scaling.factor, 8.0);
  const models::DecoderConfig gemma3_model = models::decoder_config_from_hf(gemma3);
  EXPECT_EQ(gemma3_model.rope_scaling.type, RopeScalingType::linear);  // the global table; the local one is plain
  EXPECT_EQ(gemma3_model.local_rope_theta, 10000.0);
  EXPECT_TRUE(gemma3_model.layers[0].attention.local_rope);
  EXPECT_FALSE(gemma3_model.layers[5].attention.local_rope);

  const models::HfConfig qwen = models::parse_hf_config(kQwen25_7B_Yarn, "c");
  EXPECT_EQ(qwen.rope_scaling.type, RopeScalingType::yarn);
  EXPECT_EQ(qwen.rope_scaling.factor, 4.0);  // transformers 5: the file's factor (4.x replaced it by 32768 / 32768)
  EXPECT_EQ(qwen.rope_scaling.original_max_position, 32768);
  EXPECT_EQ(qwen.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(ops::rope_attention_factor(qwen.rope_scaling), 0.1 * std::log(4.0) + 1.0);

  const models::HfConfig phi35 = models::parse_hf_config(kPhi35Mini, "c");
  EXPECT_EQ(phi35.rope_scaling.type, RopeScalingType::longrope);
  EXPECT_EQ(phi35.rope_scaling.original_max_position, 4096);  // from the top level
  EXPECT_EQ(phi35.rope_scaling.factor, 32.0);                 // 131072 / 4096
  EXPECT_EQ(phi35.rope_scaling.long_factor.size(), 48u);
  EXPECT_DOUBLE_EQ(ops::rope_attention_factor(phi35.rope_scaling), std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)));

  const models::HfConfig phi4 = models::parse_hf_config(kPhi4Mini, "c");
  EXPECT_EQ(phi4.partial_rotary_factor, 0.75);
  const models::DecoderConfig phi4_model = models::decoder_config_from_hf(phi4);
  EXPECT_EQ(phi4_model.layers[0].attention.head_size(), 128);
  EXPECT_EQ(phi4_model.layers[0].attention.rotary_size(), 96);

  for (const std::string& json : {std::string(kGemma3_4B), std::string(kQwen25_7B_Yarn), kPhi35Mini, kPhi4Mini}) {
    const models::HfConfig hf = models::parse_hf_config(json, "c");
    SCOPED_TRACE(hf.architecture);
    const std::string written = models::hf_config_json(hf);
    EXPECT_TRUE(models::parse_hf_config(written, "w") == hf) << written;
    const models::HfConfig back =
        models::hf_config_from_decoder(models::hf_family(hf).model, models::decoder_config_from_hf(hf), DType::bf16);
    EXPECT_EQ(models::hf_config_json(back), written);
  }
}

// Every other rope_type and option, written and read back; transformers 5's rope_parameters read the same.
TEST(HfAdapter, EveryRopeTypeRoundTrips) {
  for (const char* scaling : {
           R"("rope_scaling": {"rope_type": "dynamic", "factor": 2.0})",
           R"("rope_scaling": {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
              "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707})",
           R"("rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
              "truncate": false, "attention_factor": 1.2})",
           R"("rope_scaling": {"rope_type": "yarn"})",
           R"("rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5})",
       }) {
    SCOPED_TRACE(scaling);
    const models::HfConfig hf = parse_with_shape(
        fmt::format(R"({{"model_type": "llama", "max_position_embeddings": 16384, {}}})", scaling), "c");
    EXPECT_NE(hf.rope_scaling.type, ops::RopeScalingType::none);
    const std::string written = models::hf_config_json(hf);
    EXPECT_TRUE(models::parse_hf_config(written, "w") == hf) << written;
    const models::HfConfig back =
        models::hf_config_from_decoder("llama3", models::decoder_config_from_hf(hf), DType::bf16);
    models::HfConfig expected = hf;
    expected.torch_dtype = "bfloat16";
    EXPECT_EQ(models::hf_config_json(back), models::hf_config_json(expected));
  }
  // A yarn block without factor or original length: 1 and max_position_embeddings (transformers 5's derivation).
  const models::HfConfig bare =
      parse_with_shape(R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn"}})", "c");
  EXPECT_EQ(bare.rope_scaling.factor, 1.0);
  EXPECT_EQ(bare.rope_scaling.original_max_position, bare.max_position_embeddings);
}

// transformers 5 writes RoPE as rope_parameters; its numbers win over the legacy keys' defaults.
TEST(HfAdapter, RopeParametersOfTransformers5AreRead) {
  const models::HfConfig qwen2 = parse_with_shape(
      R"({"model_type": "qwen2", "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}})", "c");
  EXPECT_EQ(qwen2.rope_theta, 1e6);
  const models::HfConfig llama = parse_with_shape(
      R"({"model_type": "llama", "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})",
      "c");
  EXPECT_EQ(llama.rope_theta, 5e5);
  EXPECT_EQ(llama.rope_scaling.factor, 8.0);
  const models::HfConfig gemma3 = parse_with_shape(
      R"({"model_type": "gemma3_text", "rope_parameters": {"full_attention": {"rope_theta": 2000000.0,
          "rope_type": "default"}, "sliding_attention": {"rope_theta": 20000.0, "rope_type": "default"}}})",
      "c");
  EXPECT_EQ(gemma3.rope_theta, 2e6);
  EXPECT_EQ(gemma3.rope_local_base_freq, 2e4);
  EXPECT_EQ(models::decoder_config_from_hf(gemma3).local_rope_theta, 2e4);
}

TEST(HfAdapter, NamesMapOneToOne) {
  const models::HfFamily& llama = models::hf_family_for_model("llama3");
  const models::HfFamily& qwen3 = models::hf_family_for_model("qwen3");
  EXPECT_EQ(models::hf_tensor_name(llama, "tok_embeddings.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(models::hf_tensor_name(llama, "layers.3.attention.wq.weight"), "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(models::hf_tensor_name(qwen3, "layers.12.attention.k_norm.weight"),
            "model.layers.12.self_attn.k_norm.weight");
  EXPECT_EQ(models::hf_tensor_name(llama, "layers.12.attention.k_norm.weight"), "");  // Llama has no q/k norms
  EXPECT_EQ(models::hf_tensor_name(llama, "layers.0.feed_forward.w1.weight"), "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(models::hf_tensor_name(llama, "layers.0.feed_forward.w2.weight"), "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(models::hf_tensor_name(llama, "layers.0.feed_forward.w3.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(models::hf_tensor_name(llama, "layers.5.attention_norm.weight"), "model.layers.5.input_layernorm.weight");
  EXPECT_EQ(models::hf_tensor_name(llama, "layers.5.ffn_norm.weight"),
            "model.layers.5.post_attention_layernorm.weight");
  EXPECT_EQ(models::hf_tensor_name(llama, "norm.weight"), "model.norm.weight");
  EXPECT_EQ(models::hf_tensor_name(llama, "output.weight"), "lm_head.weight");
  EXPECT_EQ(models::titan_tensor_name(llama, "model.layers.03.self_attn.q_proj.weight"), "");
  EXPECT_EQ(models::titan_tensor_name(llama, "model.layers.3.self_attn.q_proj.bias"), "");
  EXPECT_EQ(models::titan_tensor_name(llama, "model.layers..self_attn.q_proj.weight"), "");

  // The families' own names (transformers' modeling_gemma2.py, modeling_olmo2.py, modeling_qwen2.py).
  const models::HfFamily& gemma2 = models::hf_family_for_model("gemma2");
  EXPECT_EQ(models::hf_tensor_name(gemma2, "layers.2.attention_norm.weight"), "model.layers.2.input_layernorm.weight");
  EXPECT_EQ(models::hf_tensor_name(gemma2, "layers.2.post_attention_norm.weight"),
            "model.layers.2.post_attention_layernorm.weight");
  EXPECT_EQ(models::hf_tensor_name(gemma2, "layers.2.ffn_norm.weight"),
            "model.layers.2.pre_feedforward_layernorm.weight");
  EXPECT_EQ(models::hf_tensor_name(gemma2, "layers.2.post_ffn_norm.weight"),
            "model.layers.2.post_feedforward_layernorm.weight");
  const models::HfFamily& olmo2 = models::hf_family_for_model("olmo2");
  EXPECT_EQ(models::hf_tensor_name(olmo2, "layers.1.post_attention_norm.weight"),
            "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(models::hf_tensor_name(olmo2, "layers.1.post_ffn_norm.weight"),
            "model.layers.1.post_feedforward_layernorm.weight");
  EXPECT_EQ(models::hf_tensor_name(olmo2, "layers.1.ffn_norm.weight"), "");
  EXPECT_EQ(models::titan_tensor_name(olmo2, "model.layers.1.input_layernorm.weight"), "");
  const models::HfFamily& qwen2 = models::hf_family_for_model("qwen2");
  EXPECT_EQ(models::hf_tensor_name(qwen2, "layers.4.attention.wk.bias"), "model.layers.4.self_attn.k_proj.bias");
  EXPECT_EQ(models::titan_tensor_name(qwen2, "model.layers.4.self_attn.v_proj.bias"), "layers.4.attention.wv.bias");
  EXPECT_EQ(models::titan_tensor_name(qwen2, "model.layers.4.self_attn.o_proj.bias"), "");
  // Phi-3's fused projections have no HF tensor of their own.
  const models::HfFamily& phi3 = models::hf_family_for_model("phi3");
  EXPECT_EQ(models::hf_tensor_name(phi3, "layers.0.attention.wq.weight"), "");
  EXPECT_EQ(models::hf_tensor_name(phi3, "layers.0.attention.wo.weight"), "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(models::titan_tensor_name(phi3, "model.layers.0.self_attn.qkv_proj.weight"), "");

  for (const std::string& model : models::model_names()) {
    if (models::model_spec(model).hf_family == nullptr) continue;
    SCOPED_TRACE(model);
    const models::HfFamily& family = models::hf_family_for_model(model);
    auto decoder = models::model_config(model, "debugmodel").build(Device::meta());
    std::set<std::string> seen;
    for (auto& [name, parameter] : decoder->named_parameters()) {
      const std::string hf = models::hf_tensor_name(family, name);
      // Stacked experts and fused projections are placed by hf_tensor_plan.
      if (name.find(".moe.experts.") != std::string::npos) continue;
      if (family.fused_projections &&
          (name.find(".wq.") != std::string::npos || name.find(".wk.") != std::string::npos ||
           name.find(".wv.") != std::string::npos || name.find(".w1.") != std::string::npos ||
           name.find(".w3.") != std::string::npos)) {
        EXPECT_EQ(hf, "") << name;
        continue;
      }
      // Qwen3.5's joined tensors: q_proj (wq and o_gate), in_proj_qkv and conv1d.
      if (family.gated_delta_net && (name.ends_with(".wq.weight") || name.ends_with(".o_gate.weight") ||
                                     name.find(".in_proj_q.") != name.npos || name.find(".in_proj_k.") != name.npos ||
                                     name.find(".in_proj_v.") != name.npos || name.find(".conv_") != name.npos)) {
        EXPECT_EQ(hf, "") << name;
        continue;
      }
      ASSERT_FALSE(hf.empty()) << name;
      EXPECT_TRUE(seen.insert(hf).second) << hf;
      EXPECT_EQ(models::titan_tensor_name(family, hf), name);
    }
  }
}

// The plan of HF tensors: Phi-3's fused tensors are rows of q, k, v (gate, up)
// in that order, whatever order titan lists them in; a missing part is an error.
TEST(HfAdapter, PlanStacksFusedRowsInTransformersOrder) {
  const models::HfFamily& phi3 = models::hf_family_for_model("phi3");
  const std::vector<std::pair<std::string, Shape>> tensors{
      {"layers.0.attention.wv.weight", {2, 8}},    {"layers.0.attention.wq.weight", {8, 8}},
      {"layers.0.attention.wk.weight", {2, 8}},    {"layers.0.feed_forward.w3.weight", {6, 8}},
      {"layers.0.feed_forward.w1.weight", {6, 8}}, {"layers.0.feed_forward.w2.weight", {8, 6}}};
  const auto plan = models::hf_tensor_plan(phi3, tensors);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].hf_name, "model.layers.0.self_attn.qkv_proj.weight");
  ASSERT_EQ(plan[0].parts.size(), 3u);
  EXPECT_EQ(plan[0].parts[0].titan_name, "layers.0.attention.wq.weight");
  EXPECT_EQ(plan[0].parts[1].titan_name, "layers.0.attention.wk.weight");
  EXPECT_EQ(plan[0].parts[2].titan_name, "layers.0.attention.wv.weight");
  EXPECT_EQ(plan[1].hf_name, "model.layers.0.mlp.gate_up_proj.weight");
  ASSERT_EQ(plan[1].parts.size(), 2u);
  EXPECT_EQ(plan[1].parts[0].titan_name, "layers.0.feed_forward.w1.weight");
  EXPECT_EQ(plan[1].parts[1].titan_name, "layers.0.feed_forward.w3.weight");
  EXPECT_EQ(plan[2].hf_name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_THROW(models::hf_tensor_plan(phi3, {tensors[0], tensors[1]}), Error);
  EXPECT_THROW(models::hf_tensor_plan(models::hf_family_for_model("llama3"), {{"layers.0.attention.wq.bias", {8}}}),
               Error);
  // Experts: one HF tensor per expert slice.
  const auto experts =
      models::hf_tensor_plan(models::hf_family_for_model("qwen3_moe"), {{"layers.1.moe.experts.w2", {3, 8, 4}}});
  ASSERT_EQ(experts.size(), 3u);
  EXPECT_EQ(experts[2].hf_name, "model.layers.1.mlp.experts.2.down_proj.weight");
  EXPECT_EQ(experts[2].parts.front().expert, 2);
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
  config.edit_layers([](nn::TransformerBlockConfig& layer) { layer.attention.rotary_dim = 4; });
  EXPECT_THROW(models::hf_config_from_decoder("qwen3", config, DType::f32), Error);  // no partial rotary
  config = models::model_config("qwen3", "debugmodel");
  config.rope_scaling = {.type = ops::RopeScalingType::dynamic, .factor = 2.0, .original_max_position = 16};
  EXPECT_THROW(models::hf_config_from_decoder("qwen3", config, DType::f32), Error);  // dynamic from another length
  config = models::model_config("llama3", "debugmodel");
  config.edit_layers([](nn::TransformerBlockConfig& layer) { layer.attention.rope_style = ops::RopeStyle::half; });
  EXPECT_THROW(models::hf_config_from_decoder("llama3", config, DType::f32), Error);
  EXPECT_THROW(models::hf_config_from_decoder("llama3", models::model_config("llama3", "debugmodel"), DType::i32),
               Error);
}

void expect_refused(const std::string& model, const models::DecoderConfig& config,
                    std::initializer_list<std::string> fragments) {
  try {
    models::hf_config_from_decoder(model, config, DType::f32);
    ADD_FAILURE() << "no error for " << model;
  } catch (const Error& error) {
    const std::string message = error.what();
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

// What a newer family's config.json cannot say is refused, naming it.
TEST(HfAdapter, DecoderConfigsTheFamilyCannotExpressAreRefused) {
  const auto debug = [](const std::string& model) { return models::model_config(model, "debugmodel"); };
  models::DecoderConfig config = debug("gemma2");
  config.layers[1].attention.sliding_window = config.layers[0].attention.sliding_window;  // two sliding in a row
  expect_refused("gemma2", config, {"layers that slide as SSSGSG", "its layers slide as SGSGSG"});
  config = debug("gemma3");
  config.layers[1].attention.sliding_window = 0;  // global at 1 makes the pattern 2: G at 1, 3, 5
  config.layers[1].attention.local_rope = false;
  expect_refused("gemma3", config, {"layers that slide as SGSSSG", "Gemma3ForCausalLM", "SGSGSG"});
  config = debug("mistral");
  config.layers[2].attention.sliding_window = 64;
  expect_refused("mistral", config, {"different windows (128 and 64)"});
  config = debug("mistral");
  config.layers[2].attention.sliding_window = 0;
  expect_refused("mistral", config, {"layers that slide as SSGSSS", "SSSSSS"});
  config = debug("llama3");
  config.edit_layers([](nn::TransformerBlockConfig& layer) { layer.attention.sliding_window = 16; });
  expect_refused("llama3", config, {"sliding-window attention has no LlamaForCausalLM equivalent"});
  config = debug("llama3");
  config.layers[0].attention.qkv_bias = true;
  expect_refused("llama3", config, {"layer 0", "q/k/v biases"});
  config = debug("qwen2");
  config.layers[3].attention.qkv_bias = false;
  expect_refused("qwen2", config, {"layer 3", "without biases"});
  config = debug("olmo2");
  config.layers[0].pre_norms = true;
  expect_refused("olmo2", config, {"placement of norms"});
  config = debug("gemma2");
  config.embedding_scale = 0.0;
  expect_refused("gemma2", config, {"embeddings scaled by 0"});
  config = debug("gemma2");
  config.layers[4].feed_forward.activation = nn::FeedForwardActivation::silu;
  expect_refused("gemma2", config, {"layer 4", "activation"});
  config = debug("mistral");
  config.loss.softcap = 30.0f;
  expect_refused("mistral", config, {"final logit soft-capping"});
  config = debug("phi3");
  config.layers[0].attention.logit_softcap = 50.0f;
  expect_refused("phi3", config, {"soft-cap"});
  config = debug("gemma3");
  config.layers[0].attention.qk_norm_weight_offset = 0.0;
  expect_refused("gemma3", config, {"kind of q/k norm"});
  // Gemma 3 with every layer global still says so (sliding_window_pattern 1).
  config = debug("gemma3");
  config.edit_layers([](nn::TransformerBlockConfig& layer) {
    layer.attention.sliding_window = 0;
    layer.attention.local_rope = false;
  });
  const models::HfConfig all_global = models::hf_config_from_decoder("gemma3", config, DType::f32);
  EXPECT_EQ(all_global.sliding_window_pattern, 1);
  EXPECT_EQ(windows(models::decoder_config_from_hf(all_global)), std::vector<int64_t>(6, 0));
}

// PEFT names adapters by HF module; Phi-3 has no q_proj, k_proj, gate_proj...
// of its own, so its adapters cannot be written, and fused adapters are not read.
TEST(HfAdapter, PeftAdaptersOfFusedFamiliesAreRefused) {
  EXPECT_FALSE(models::peft_adapter_supported("phi3"));
  EXPECT_TRUE(models::peft_adapter_supported("qwen2"));
  models::DecoderConfig config = models::model_config("phi3", "debugmodel", 64);
  config.layers.resize(1);
  auto model = config.build();
  Generator init(1);
  models::apply_lora(*model, {}, init, nullptr);
  data::testing::TempDir dir;
  try {
    models::write_peft_adapter((dir / "adapter").string(), *model, "phi3", {}, "base", DType::f32);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("Phi3ForCausalLM fuses q/k/v (qkv_proj)"), std::string::npos)
        << error.what();
  }
  std::filesystem::create_directories(dir / "fused");
  data::testing::write_bytes(dir / "fused" / "adapter_config.json",
                             R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["qkv_proj"]})");
  checkpoint::write_safetensors(
      (dir / "fused" / "adapter_model.safetensors").string(),
      {{"base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight", Tensor::zeros({2, 256})}});
  try {
    models::read_peft_adapter((dir / "fused").string(), config);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("adapts model.layers.0.self_attn.qkv_proj, a fused projection"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace hf_adapter_test
}  // namespace titan
