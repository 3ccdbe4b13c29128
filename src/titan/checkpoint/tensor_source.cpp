#include "titan/checkpoint/tensor_source.h"

namespace titan::checkpoint {

TensorSources sources_of(const NamedTensors& tensors) {
  TensorSources sources;
  sources.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    TITAN_CHECK(tensor.defined(), "tensor '{}' is undefined", name);
    sources.push_back({name, tensor.dtype(), tensor.shape(), [held = tensor] { return held; }});
  }
  return sources;
}

void write_safetensors(const std::string& path, const TensorSources& sources,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Spec> specs;
  specs.reserve(sources.size());
  for (const TensorSource& source : sources) specs.push_back({source.name, source.dtype, source.shape});
  SafetensorsWriter writer(path, specs, metadata);
  for (const TensorSource& source : sources) writer.write(source.name, source.read());
  writer.finish();
}

}  // namespace titan::checkpoint
