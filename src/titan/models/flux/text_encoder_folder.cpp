#include "titan/models/flux/text_encoder_folder.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/models/flux/text_encoder_config_json.h"
#include "titan/models/hf/hf_weight_files.h"

namespace titan::models::flux {
namespace {

namespace fs = std::filesystem;

std::string read_config_json(const std::string& folder) {
  const fs::path path = fs::path(folder) / "config.json";
  TITAN_CHECK(fs::is_regular_file(path), "{}: missing config.json (not a Hugging Face model folder?)", folder);
  std::ifstream file(path, std::ios::binary);
  TITAN_CHECK(file.good(), "cannot open '{}'", path.string());
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// Copies every parameter of `model` from the folder's tensor of the same name.
// `ignorable`: tensors transformers saves that the model has no use for.
void load_parameters(nn::Module& model, const HfWeightFiles& files, DType dtype,
                     const std::function<bool(const std::string&)>& ignorable) {
  std::set<std::string> used;
  for (const auto& [name, parameter] : model.named_parameters()) {
    TITAN_CHECK(files.contains(name), "{}: the weights have no tensor '{}'", files.folder(), name);
    const checkpoint::SafetensorsEntry& entry = files.entry(name);
    TITAN_CHECK(Shape(entry.shape.begin(), entry.shape.end()) == parameter->data.shape(),
                "{}: tensor '{}' has shape {}, the config.json's model needs {}", files.file_of(name), name,
                shape_str(Shape(entry.shape.begin(), entry.shape.end())), shape_str(parameter->data.shape()));
    TITAN_CHECK(is_floating(entry.dtype), "{}: tensor '{}' is {}, not a float dtype", files.file_of(name), name,
                dtype_name(entry.dtype));
    TITAN_CHECK(parameter->data.dtype() == dtype, "loading '{}': the model's parameter is not {}", name,
                dtype_name(dtype));
    copy_(parameter->data, files.read(name));
    used.insert(name);
  }
  for (const std::string& name : files.tensor_names()) {
    TITAN_CHECK(used.count(name) != 0 || ignorable(name),
                "{}: tensor '{}' is not a parameter of the model its config.json describes", files.file_of(name), name);
  }
}

}  // namespace

std::shared_ptr<T5Encoder> load_t5_encoder(const std::string& folder, DType dtype, Device device) {
  const T5EncoderConfig config =
      parse_t5_encoder_config(read_config_json(folder), (fs::path(folder) / "config.json").string());
  const HfWeightFiles files(folder);
  auto model = std::make_shared<T5Encoder>(config, device);
  model->to(dtype);
  // T5EncoderModel ties the encoder's embedding to "shared"; some files save both.
  load_parameters(*model, files, dtype, [](const std::string& name) { return name == "encoder.embed_tokens.weight"; });
  return model;
}

std::shared_ptr<ClipTextEncoder> load_clip_text_encoder(const std::string& folder, DType dtype, Device device) {
  const ClipTextConfig config =
      parse_clip_text_config(read_config_json(folder), (fs::path(folder) / "config.json").string());
  const HfWeightFiles files(folder);
  auto model = std::make_shared<ClipTextEncoder>(config, device);
  model->to(dtype);
  // Older files keep the position ids buffer (0..76), which the encoder computes.
  load_parameters(*model, files, dtype,
                  [](const std::string& name) { return name == "text_model.embeddings.position_ids"; });
  return model;
}

}  // namespace titan::models::flux
