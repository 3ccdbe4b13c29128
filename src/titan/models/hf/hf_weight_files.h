// The safetensors weights of a Hugging Face folder, whatever its config.json
// describes: model.safetensors, or the shards model.safetensors.index.json
// lists (each checked to hold what the index says, and nothing else). For
// models that are not decoders (FLUX's T5 and CLIP text encoders); the decoder
// reader (HfFolderReader) does the same and also reads torch.save files.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/checkpoint/safetensors.h"

namespace titan::models {

class HfWeightFiles {
 public:
  // Errors name the folder and the file.
  explicit HfWeightFiles(std::string folder);
  const std::string& folder() const { return folder_; }
  // Every tensor name, sorted.
  std::vector<std::string> tensor_names() const;
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const std::string& file_of(const std::string& name) const { return shard_of(name).path(); }
  const checkpoint::SafetensorsEntry& entry(const std::string& name) const { return shard_of(name).entry(name); }
  Tensor read(const std::string& name) const { return shard_of(name).read(name); }

 private:
  const checkpoint::SafetensorsReader& shard_of(const std::string& name) const;
  std::string folder_;
  std::vector<std::unique_ptr<checkpoint::SafetensorsReader>> shards_;
  std::map<std::string, size_t> where_;  // tensor -> shard
};

}  // namespace titan::models
