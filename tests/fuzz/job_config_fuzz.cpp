// libFuzzer entry point: the TOML job config loader. Any input is either
// refused with titan::Error or loads into a config that dumps and reloads to
// the same text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "titan/core/error.h"
#include "titan/train/config_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  titan::train::JobConfig config;
  try {
    titan::train::load_toml_string(config, text, "fuzz.toml");
  } catch (const titan::Error&) {
    return 0;
  }
  const std::string dumped = titan::train::config_to_toml(config);
  titan::train::JobConfig reloaded;
  try {
    titan::train::load_toml_string(reloaded, dumped, "dump.toml");
  } catch (const titan::Error&) {
    std::abort();  // what we write must read back
  }
  if (titan::train::config_to_toml(reloaded) != dumped) std::abort();
  return 0;
}
