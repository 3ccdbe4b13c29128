// libFuzzer entry point: config.json of FLUX's text encoders (T5Config and
// CLIPTextConfig, models/flux/text_encoder_config_json.h). Any input is
// refused with titan::Error or parses to a config that validates.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "titan/core/error.h"
#include "titan/models/flux/text_encoder_config_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    titan::models::flux::parse_t5_encoder_config(text, "fuzz/config.json").validate();
  } catch (const titan::Error&) {
  }
  try {
    titan::models::flux::parse_clip_text_config(text, "fuzz/config.json").validate();
  } catch (const titan::Error&) {
  }
  return 0;
}
