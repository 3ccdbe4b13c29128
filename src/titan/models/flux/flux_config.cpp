#include "titan/models/flux/flux_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "titan/core/error.h"

namespace titan::models::flux {

void FluxConfig::validate() const {
  TITAN_CHECK(hidden_size > 0 && num_heads > 0 && hidden_size % num_heads == 0,
              "flux: hidden_size {} must be a positive multiple of num_heads {}", hidden_size, num_heads);
  const int64_t axes = axes_dim[0] + axes_dim[1] + axes_dim[2];
  TITAN_CHECK(axes == head_dim(), "flux: axes_dim [{}] must sum to the head width hidden_size / num_heads = {}",
              fmt::join(axes_dim, ", "), head_dim());
  for (const int64_t axis : axes_dim) {
    TITAN_CHECK(axis > 0 && axis % 2 == 0, "flux: every axes_dim entry must be positive and even (got [{}])",
                fmt::join(axes_dim, ", "));
  }
  TITAN_CHECK(in_channels > 0 && out_channels > 0 && vec_in_dim > 0 && context_in_dim > 0,
              "flux: in_channels, out_channels, vec_in_dim and context_in_dim must be positive");
  TITAN_CHECK(depth >= 0 && depth_single_blocks >= 0 && depth + depth_single_blocks > 0,
              "flux: depth {} and depth_single_blocks {} must not be negative, nor both zero", depth,
              depth_single_blocks);
  TITAN_CHECK(mlp_ratio > 0 && mlp_hidden_dim() > 0, "flux: mlp_ratio must be positive (got {})", mlp_ratio);
  TITAN_CHECK(theta > 0 && norm_eps > 0 && qk_norm_eps > 0, "flux: theta and the norms' eps must be positive");
}

namespace {

FluxConfig flux_large(bool guidance) {
  FluxConfig config;  // the defaults are FLUX.1's 12B transformer
  config.guidance_embed = guidance;
  return config;
}

}  // namespace

FluxConfig flux_flavor(const std::string& flavor) {
  if (flavor == "flux-dev") return flux_large(true);
  if (flavor == "flux-schnell") return flux_large(false);
  if (flavor == "flux-debug") {
    FluxConfig config;
    config.hidden_size = 1536;
    config.num_heads = 12;
    config.depth = 2;
    config.depth_single_blocks = 2;
    return config;
  }
  fail("flux: unknown flavor '{}' (known: {})", flavor, fmt::join(flux_flavor_names(), ", "));
}

std::vector<std::string> flux_flavor_names() { return {"flux-debug", "flux-schnell", "flux-dev"}; }

}  // namespace titan::models::flux
