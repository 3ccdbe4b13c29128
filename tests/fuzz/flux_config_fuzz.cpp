// libFuzzer entry point: Diffusers' FluxTransformer2DModel config.json. Any
// input is either refused with titan::Error or parses to a config whose
// written form parses back to the same text.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "titan/core/error.h"
#include "titan/models/flux/flux_diffusers_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  titan::models::flux::FluxConfig config;
  try {
    config = titan::models::flux::parse_diffusers_flux_config(text, "fuzz/config.json");
  } catch (const titan::Error&) {
    return 0;
  }
  const std::string written = titan::models::flux::diffusers_flux_config_json(config);
  try {
    using titan::models::flux::diffusers_flux_config_json;
    using titan::models::flux::parse_diffusers_flux_config;
    if (diffusers_flux_config_json(parse_diffusers_flux_config(written, "written")) != written) std::abort();
  } catch (const titan::Error&) {
    std::abort();
  }
  return 0;
}
