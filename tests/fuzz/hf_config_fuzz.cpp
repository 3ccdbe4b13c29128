// libFuzzer entry point: Hugging Face config.json files. Any input is either
// refused with titan::Error or parses to a config whose written form parses
// back to the same text (the writer never emits what the parser refuses).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "titan/core/error.h"
#include "titan/models/hf/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  titan::models::HfConfig config;
  try {
    config = titan::models::parse_hf_config(text, "fuzz/config.json");
  } catch (const titan::Error&) {
    return 0;
  }
  const std::string written = titan::models::hf_config_json(config);
  try {
    if (titan::models::hf_config_json(titan::models::parse_hf_config(written, "written")) != written) std::abort();
  } catch (const titan::Error&) {
    std::abort();
  }
  return 0;
}
