#include "titan/models/flux/flux_diffusers_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "titan/core/error.h"
#include "titan/models/hf/config_json_reader.h"

namespace titan::models::flux {
namespace {

constexpr const char* kClassName = "FluxTransformer2DModel";
// Beyond these no FLUX is trained; refusing them keeps widths x depths far from overflow.
constexpr int64_t kMaxWidth = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 10000;

}  // namespace

FluxConfig parse_diffusers_flux_config(std::string_view text, const std::string& source) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    fail("{}: not JSON: {}", source, error.what());
  }
  TITAN_CHECK(json.is_object(), "{}: a Diffusers config.json must be a JSON object", source);
  const ConfigJsonReader reader(json, source);
  const std::string class_name = reader.get_string("_class_name");
  TITAN_CHECK(class_name.empty() || class_name == kClassName, "{}: '_class_name' is {}, not {}", source, class_name,
              kClassName);
  int64_t patch_size = 1;
  reader.get_positive("patch_size", patch_size, kMaxWidth);
  TITAN_CHECK(patch_size == 1, "{}: 'patch_size' = {}: FLUX's transformer reads packed 2x2 patches (patch_size 1)",
              source, patch_size);
  FluxConfig config;
  int64_t head_dim = 0;
  reader.get_required("num_layers", config.depth, kMaxLayers);
  reader.get_required("num_single_layers", config.depth_single_blocks, kMaxLayers);
  reader.get_required("attention_head_dim", head_dim, kMaxWidth);
  reader.get_required("num_attention_heads", config.num_heads, kMaxWidth);
  reader.get_required("joint_attention_dim", config.context_in_dim, kMaxWidth);
  reader.get_required("pooled_projection_dim", config.vec_in_dim, kMaxWidth);
  reader.get_required("in_channels", config.in_channels, kMaxWidth);
  config.out_channels = config.in_channels;
  reader.get_positive("out_channels", config.out_channels, kMaxWidth);
  config.guidance_embed = false;
  reader.get("guidance_embeds", config.guidance_embed);
  TITAN_CHECK(head_dim * config.num_heads <= kMaxWidth, "{}: attention_head_dim x num_attention_heads = {} is too wide",
              source, head_dim * config.num_heads);
  config.hidden_size = head_dim * config.num_heads;
  if (reader.has("axes_dims_rope")) {
    const nlohmann::json& axes = json["axes_dims_rope"];
    TITAN_CHECK(axes.is_array() && axes.size() == 3, "{}: 'axes_dims_rope' must be a list of 3 integers, got {}",
                source, axes.dump());
    for (size_t i = 0; i < 3; ++i) {
      TITAN_CHECK(axes[i].is_number_integer() && axes[i].get<int64_t>() > 0 && axes[i].get<int64_t>() <= kMaxWidth,
                  "{}: 'axes_dims_rope' entries must be positive integers, got {}", source, axes.dump());
      config.axes_dim[i] = axes[i].get<int64_t>();
    }
  }
  try {
    config.validate();
  } catch (const Error& error) {
    fail("{}: {}", source, error.what());
  }
  return config;
}

std::string diffusers_flux_config_json(const FluxConfig& config) {
  nlohmann::ordered_json json;
  json["_class_name"] = kClassName;
  json["patch_size"] = 1;
  json["in_channels"] = config.in_channels;
  json["out_channels"] = config.out_channels;
  json["num_layers"] = config.depth;
  json["num_single_layers"] = config.depth_single_blocks;
  json["attention_head_dim"] = config.head_dim();
  json["num_attention_heads"] = config.num_heads;
  json["joint_attention_dim"] = config.context_in_dim;
  json["pooled_projection_dim"] = config.vec_in_dim;
  json["guidance_embeds"] = config.guidance_embed;
  json["axes_dims_rope"] = config.axes_dim;
  return json.dump(2) + "\n";
}

FluxConfig read_diffusers_flux_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TITAN_CHECK(in.good(), "{}: cannot read the Diffusers transformer config", path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_diffusers_flux_config(text.str(), path);
}

}  // namespace titan::models::flux
