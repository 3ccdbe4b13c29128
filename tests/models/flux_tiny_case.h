// The tiny FLUX model of tests/reference/flux.py (TINY) and its reference
// case, shared by the FLUX tests.
#pragma once

#include "support/reference.h"
#include "titan/models/flux/flux_config.h"

namespace titan::testing {

// tests/reference/flux.py's TINY: every feature on (guidance, biases, all three RoPE axes).
inline models::flux::FluxConfig flux_tiny_config() {
  models::flux::FluxConfig config;
  config.in_channels = 16;
  config.out_channels = 16;
  config.vec_in_dim = 32;
  config.context_in_dim = 48;
  config.hidden_size = 64;
  config.num_heads = 4;
  config.depth = 2;
  config.depth_single_blocks = 2;
  config.axes_dim = {4, 6, 6};
  config.guidance_embed = true;
  return config;
}

inline const ReferenceCase& flux_tiny_case() {
  static const ReferenceCase ref("flux_tiny");
  return ref;
}

}  // namespace titan::testing
