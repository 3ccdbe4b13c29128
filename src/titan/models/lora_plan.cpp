#include "titan/models/lora_plan.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "titan/models/hf/hf_decoder_config.h"
#include "titan/nn/initialize.h"
#include "titan/nn/lora_targets.h"

namespace titan::models {
namespace {

// The Linear at `path` ("attention.wq") of a block, or null when the block has none (an MoE block's feed-forward).
nn::Linear* block_linear(nn::TransformerBlock& block, const std::string& path) {
  TITAN_CHECK(block.attention != nullptr || !path.starts_with("attention."),
              "LoRA: '{}' names a projection of ordinary attention; this model's layers use latent or linear "
              "(Gated DeltaNet) attention",
              path);
  if (path == "attention.wq") return block.attention->wq.get();
  if (path == "attention.wk") return block.attention->wk.get();
  if (path == "attention.wv") return block.attention->wv.get();
  if (path == "attention.wo") return block.attention->wo.get();
  if (!block.feed_forward) return nullptr;
  if (path == "feed_forward.w1") return block.feed_forward->w1.get();
  if (path == "feed_forward.w3") return block.feed_forward->w3.get();
  if (path == "feed_forward.w2") return block.feed_forward->w2.get();
  fail("LoRA: no projection '{}' in a block", path);
}

std::string ends_with_removed(const std::string& text, const std::string& suffix) {
  if (text.size() < suffix.size() || text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0) return "";
  return text.substr(0, text.size() - suffix.size());
}

}  // namespace

std::vector<std::string> lora_hf_target_modules(const std::vector<std::string>& targets) {
  std::vector<std::string> names;
  for (const nn::LoraTarget& target : nn::kLoraTargets) {
    const bool chosen = std::any_of(targets.begin(), targets.end(), [&](const std::string& name) {
      const auto found = nn::find_lora_target(name);
      return found && std::string(found->name) == target.name;
    });
    if (chosen) names.emplace_back(target.hf_name);
  }
  return names;
}

std::vector<LoraAdapted> apply_lora(Decoder& model, const LoraOptions& options, const Generator& init,
                                    Generator* dropout) {
  TITAN_CHECK(options.rank > 0, "lora.rank must be > 0, got {}", options.rank);
  TITAN_CHECK(!options.target_modules.empty(), "lora.target_modules is empty: name at least one projection");
  // Everything the model had is frozen; only the adapters train.
  for (auto& [name, parameter] : model.named_parameters()) parameter->data.set_requires_grad(false);
  std::vector<LoraAdapted> adapted;
  for (const std::string& name : options.target_modules) {
    const auto target = nn::find_lora_target(name);
    TITAN_CHECK(target.has_value(),
                "lora.target_modules: '{}' is not one of q, k, v, o, gate, up, down (or q_proj, k_proj, v_proj, "
                "o_proj, gate_proj, up_proj, down_proj)",
                name);
    size_t matched = 0;
    for (size_t i = 0; i < model.layers->size(); ++i) {
      nn::Linear* linear = block_linear(*(*model.layers)[i], target->module);
      if (linear == nullptr) continue;
      const std::string module = fmt::format("layers.{}.{}", model.layers->key(i), target->module);
      TITAN_CHECK(linear->adapter() == nullptr, "lora.target_modules names {} twice ('{}')", module, name);
      nn::LoraConfig config{linear->config.in_features, linear->config.out_features, options.rank, options.alpha,
                            options.dropout};
      auto adapter = std::make_shared<nn::LoraAdapter>(config, linear->weight->data.device(), dropout);
      linear->set_adapter(adapter);
      for (const auto& [name, part] : adapter->modules()) nn::initialize(*part, init.seed(), module + "." + name + ".");
      adapted.push_back({module, linear, adapter});
      ++matched;
    }
    TITAN_CHECK(matched > 0,
                "lora.target_modules: '{}' matches no module of this model (LoRA adapts attention and dense "
                "feed-forward projections; mixture-of-experts experts are not supported)",
                name);
  }
  model.name_modules();
  return adapted;
}

std::vector<LoraAdapted> lora_adapters(Decoder& model) {
  std::vector<LoraAdapted> adapted;
  for (size_t i = 0; i < model.layers->size(); ++i) {
    for (const nn::LoraTarget& target : nn::kLoraTargets) {
      nn::Linear* linear = block_linear(*(*model.layers)[i], target.module);
      if (linear == nullptr) continue;
      auto lora = std::dynamic_pointer_cast<nn::LoraAdapter>(linear->adapter());
      if (lora) adapted.push_back({fmt::format("layers.{}.{}", model.layers->key(i), target.module), linear, lora});
    }
  }
  return adapted;
}

namespace {

constexpr const char* kPeftPrefix = "base_model.model.";

// "layers.0.attention.wq" -> "base_model.model.model.layers.0.self_attn.q_proj"
std::string peft_module_name(const HfFamily& family, const std::string& module) {
  const std::string hf = hf_tensor_name(family, module + ".weight");
  const std::string stem = ends_with_removed(hf, ".weight");
  TITAN_CHECK(!stem.empty(), "LoRA: {} has no Hugging Face module of its own in {}", module, family.architecture);
  return kPeftPrefix + stem;
}

// Every family whose projections are HF tensors of their own names them alike
// (families differ in their norms and biases, which LoRA does not adapt), so
// reading an adapter needs no family: a default HfFamily names them so.
const HfFamily kUnfusedFamily{};

}  // namespace

bool peft_adapter_supported(const std::string& model_name) {
  for (const HfFamily& family : hf_families()) {
    // PEFT names are read as a plain causal LM's (model.layers....): a nested text tower is not.
    // Qwen3.5's q_proj holds the output gate's rows too: an adapter of wq alone has no PEFT form.
    if (family.model == model_name) {
      return !family.fused_projections && !family.gated_delta_net && family.weights_prefix == "model.";
    }
  }
  return true;
}

void write_peft_adapter(const std::string& folder, Decoder& model, const std::string& model_name,
                        const LoraOptions& options, const std::string& base_model_name_or_path, DType dtype) {
  WholeAdapters adapters;
  for (const LoraAdapted& adapted : lora_adapters(model)) {
    adapters[adapted.module] = {adapted.adapter->lora_A->weight->data, adapted.adapter->lora_B->weight->data};
  }
  write_peft_adapter(folder, adapters, model.config, model_name, options, base_model_name_or_path, dtype);
}

void write_peft_adapter(const std::string& folder, const WholeAdapters& adapters, const DecoderConfig& decoder,
                        const std::string& model_name, const LoraOptions& options,
                        const std::string& base_model_name_or_path, DType dtype) {
  const HfFamily& family = hf_family_for_model(model_name);
  TITAN_CHECK(!family.fused_projections,
              "LoRA: {} fuses q/k/v (qkv_proj) and gate/up (gate_up_proj) into one tensor each, so titan's "
              "adapters of the separate projections have no PEFT form for it (export the merged weights instead)",
              family.architecture);
  std::filesystem::create_directories(folder);
  checkpoint::NamedTensors tensors;
  for (const auto& [module, ab] : adapters) {
    const std::string name = peft_module_name(family, module);
    const Tensor a = ab.first.detach().to(Device::cpu());
    // B's rows are the base weight's output rows: they take its Hugging Face (RoPE) order.
    const Tensor b = to_hf_layout(module + ".weight", ab.second.detach().to(Device::cpu()), decoder);
    tensors.emplace_back(name + ".lora_A.weight", a.to(dtype));
    tensors.emplace_back(name + ".lora_B.weight", b.to(dtype));
  }
  TITAN_CHECK(!tensors.empty(), "LoRA: the model has no adapters to write to {}", folder);
  checkpoint::write_safetensors((std::filesystem::path(folder) / "adapter_model.safetensors").string(), tensors,
                                {{"format", "pt"}});
  const nlohmann::json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", base_model_name_or_path},
      {"r", options.rank},
      {"lora_alpha", options.alpha},
      {"lora_dropout", options.dropout},
      {"target_modules", lora_hf_target_modules(options.target_modules)},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"use_rslora", false},
      {"use_dora", false},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"modules_to_save", nullptr},
      {"rank_pattern", nlohmann::json::object()},
      {"alpha_pattern", nlohmann::json::object()},
  };
  std::ofstream out(std::filesystem::path(folder) / "adapter_config.json");
  out << config.dump(2) << "\n";
  TITAN_CHECK(out.good(), "LoRA: cannot write {}/adapter_config.json", folder);
}

PeftAdapter read_peft_adapter(const std::string& folder, const DecoderConfig& config) {
  const std::filesystem::path root(folder);
  const std::string config_path = (root / "adapter_config.json").string();
  std::ifstream in(config_path);
  TITAN_CHECK(in.good(),
              "{}: no adapter_config.json (a PEFT LoRA adapter folder holds adapter_config.json and "
              "adapter_model.safetensors)",
              folder);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", config_path, e.what());
  }
  TITAN_CHECK(json.is_object(), "{}: expected a JSON object, found {}", config_path, json.type_name());
  // Each key read with its expected type; a wrong one is named with what it holds.
  const auto value = [&](const char* key, bool (nlohmann::json::*is)() const noexcept, const char* what,
                         const nlohmann::json& fallback) -> nlohmann::json {
    if (!json.contains(key) || json[key].is_null()) {
      TITAN_CHECK(!fallback.is_discarded(), "{}: required key '{}' is missing", config_path, key);
      return fallback;
    }
    TITAN_CHECK((json[key].*is)(), "{}: '{}' must be {}, got {}", config_path, key, what, json[key].dump());
    return json[key];
  };
  const nlohmann::json required = nlohmann::json::value_t::discarded;
  PeftAdapter adapter;
  const std::string peft_type = value("peft_type", &nlohmann::json::is_string, "a string", "LORA").get<std::string>();
  TITAN_CHECK(peft_type == "LORA", "{}: peft_type '{}' is not LORA", config_path, peft_type);
  adapter.options.rank = value("r", &nlohmann::json::is_number_integer, "an integer", required).get<int64_t>();
  adapter.options.alpha = value("lora_alpha", &nlohmann::json::is_number, "a number", required).get<double>();
  adapter.options.dropout = value("lora_dropout", &nlohmann::json::is_number, "a number", 0.0).get<double>();
  const auto flag = [&](const char* key) {
    return value(key, &nlohmann::json::is_boolean, "true or false", false).get<bool>();
  };
  TITAN_CHECK(!flag("use_rslora"), "{}: use_rslora: rank-stabilised scaling is not supported", config_path);
  TITAN_CHECK(!flag("use_dora"), "{}: use_dora: DoRA adapters are not supported", config_path);
  TITAN_CHECK(!flag("fan_in_fan_out"), "{}: fan_in_fan_out: only [out, in] weights are supported", config_path);
  const auto object = [&](const char* key) {
    return value(key, &nlohmann::json::is_object, "an object", nlohmann::json::object());
  };
  TITAN_CHECK(object("rank_pattern").empty() && object("alpha_pattern").empty(),
              "{}: rank_pattern / alpha_pattern (per-module ranks) are not supported", config_path);
  adapter.options.target_modules.clear();
  const nlohmann::json targets = json.contains("target_modules") ? json["target_modules"] : nlohmann::json();
  if (targets.is_array()) {
    for (const auto& name : targets) {
      TITAN_CHECK(name.is_string(), "{}: target_modules holds {}, not a module name", config_path, name.dump());
      adapter.options.target_modules.push_back(name.get<std::string>());
    }
  } else {
    TITAN_CHECK(targets.is_null() || targets.is_string(),
                "{}: 'target_modules' must be a list of module names (or a string), got {}", config_path,
                targets.dump());
  }
  TITAN_CHECK(adapter.options.rank > 0, "{}: r must be > 0, got {}", config_path, adapter.options.rank);
  const std::string weights_path = (root / "adapter_model.safetensors").string();
  checkpoint::SafetensorsReader reader(weights_path);
  std::map<std::string, Tensor> a_of, b_of;
  for (const auto& entry : reader.header().entries) {
    const std::string& name = entry.name;
    TITAN_CHECK(name.rfind(kPeftPrefix, 0) == 0, "{}: tensor '{}' does not start with {}", weights_path, name,
                kPeftPrefix);
    const std::string rest = name.substr(std::string(kPeftPrefix).size());
    const bool is_a = !ends_with_removed(rest, ".lora_A.weight").empty();
    const std::string stem =
        is_a ? ends_with_removed(rest, ".lora_A.weight") : ends_with_removed(rest, ".lora_B.weight");
    TITAN_CHECK(!stem.empty(), "{}: tensor '{}' is neither a lora_A nor a lora_B weight", weights_path, name);
    TITAN_CHECK(!stem.ends_with(".qkv_proj") && !stem.ends_with(".gate_up_proj"),
                "{}: tensor '{}' adapts {}, a fused projection (Phi-3's); adapters of fused projections are not "
                "supported (titan keeps q/k/v and gate/up apart)",
                weights_path, name, stem);
    const std::string titan = titan_tensor_name(kUnfusedFamily, stem + ".weight");
    TITAN_CHECK(!titan.empty(), "{}: tensor '{}' adapts {}, which is not a projection of a titan model", weights_path,
                name, stem);
    const std::string module = ends_with_removed(titan, ".weight");
    Tensor t = reader.read(name).to(DType::f32);
    if (is_a) {
      a_of[module] = t;
    } else {
      b_of[module] = from_hf_layout(titan, t, config);
    }
  }
  for (const auto& [module, a] : a_of) {
    const auto b = b_of.find(module);
    TITAN_CHECK(b != b_of.end(), "{}: {} has lora_A but no lora_B", weights_path, module);
    TITAN_CHECK(a.dim() == 2 && b->second.dim() == 2 && a.size(0) == adapter.options.rank &&
                    b->second.size(1) == adapter.options.rank,
                "{}: {} has lora_A {} and lora_B {}; expected [r, in] and [out, r] with r = {}", weights_path, module,
                shape_str(a.shape()), shape_str(b->second.shape()), adapter.options.rank);
    adapter.weights[module] = {a, b->second};
  }
  for (const auto& [module, b] : b_of) {
    TITAN_CHECK(a_of.count(module) > 0, "{}: {} has lora_B but no lora_A", weights_path, module);
  }
  TITAN_CHECK(!adapter.weights.empty(), "{}: holds no LoRA weights", weights_path);
  return adapter;
}

void check_peft_adapter_fits(const std::set<std::string>& weight_names, const PeftAdapter& adapter) {
  for (const auto& [module, ab] : adapter.weights) {
    TITAN_CHECK(weight_names.count(module + ".weight") != 0,
                "merge LoRA: the adapter adapts {}, which the base model does not have", module);
  }
}

Tensor merged_peft_weight(const std::string& name, const Tensor& weight, const PeftAdapter& adapter) {
  if (!name.ends_with(".weight")) return weight;
  const auto found = adapter.weights.find(name.substr(0, name.size() - std::string(".weight").size()));
  if (found == adapter.weights.end()) return weight;
  const auto& [a, b] = found->second;
  TITAN_CHECK(weight.dim() == 2 && weight.size(0) == b.size(0) && weight.size(1) == a.size(1),
              "merge LoRA: {} is {} but the adapter's B A is [{}, {}]", name, shape_str(weight.shape()), b.size(0),
              a.size(1));
  return nn::lora_merged_weight(weight, a, b, adapter.options.alpha / static_cast<double>(adapter.options.rank));
}

void merge_peft_adapter(std::map<std::string, Tensor>& state, const PeftAdapter& adapter) {
  std::set<std::string> names;
  for (const auto& [name, tensor] : state) names.insert(name);
  check_peft_adapter_fits(names, adapter);
  for (auto& [name, tensor] : state) tensor = merged_peft_weight(name, tensor, adapter);
}

}  // namespace titan::models
