// libFuzzer entry point: model.safetensors.index.json. Any input is either
// refused with titan::Error or maps tensors to plain .safetensors file names
// (never a path out of the folder), and round-trips through the writer.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "titan/core/error.h"
#include "titan/models/hf/hf_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  titan::models::HfIndex index;
  try {
    index = titan::models::parse_hf_index(text, "fuzz/model.safetensors.index.json");
  } catch (const titan::Error&) {
    return 0;
  }
  for (const std::string& file : index.files()) {
    if (file.find('/') != std::string::npos || file == ".." || file.empty()) std::abort();
  }
  try {
    const auto again = titan::models::parse_hf_index(titan::models::hf_index_json(index), "written");
    if (again.weight_map != index.weight_map || again.total_size != index.total_size) std::abort();
  } catch (const titan::Error&) {
    std::abort();
  }
  return 0;
}
