// libFuzzer entry point: safetensors headers (checkpoints, Hugging Face
// weights). Any input is either refused with titan::Error or yields entries
// whose byte ranges lie inside the data section and do not overlap.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "titan/checkpoint/safetensors_header.h"
#include "titan/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto header = titan::checkpoint::parse_safetensors_header(bytes, size, "fuzz.safetensors");
    uint64_t previous_end = 0;
    for (const auto& entry : header.entries) {
      if (entry.begin < previous_end || entry.end < entry.begin || header.data_offset + entry.end > size) std::abort();
      previous_end = entry.end;
    }
  } catch (const titan::Error&) {
  }
  return 0;
}
