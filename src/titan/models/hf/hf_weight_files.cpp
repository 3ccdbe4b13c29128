#include "titan/models/hf/hf_weight_files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "titan/core/error.h"
#include "titan/models/hf/hf_index.h"

namespace titan::models {

namespace fs = std::filesystem;

HfWeightFiles::HfWeightFiles(std::string folder) : folder_(std::move(folder)) {
  const fs::path root(folder_);
  TITAN_CHECK(fs::is_directory(root), "'{}' is not a folder", folder_);
  const fs::path index_path = root / kHfIndexFile;
  if (fs::is_regular_file(index_path)) {
    const std::string source = index_path.string();
    std::ifstream file(index_path, std::ios::binary);
    TITAN_CHECK(file.good(), "cannot open '{}'", source);
    std::ostringstream text;
    text << file.rdbuf();
    const HfIndex index = parse_hf_index(text.str(), source);
    std::map<std::string, size_t> shard_of_file;
    for (const std::string& name : index.files()) {
      TITAN_CHECK(fs::is_regular_file(root / name), "{}: shard '{}' does not exist", source, name);
      shard_of_file[name] = shards_.size();
      shards_.push_back(std::make_unique<checkpoint::SafetensorsReader>((root / name).string()));
    }
    for (const auto& [tensor, name] : index.weight_map) {
      const size_t shard = shard_of_file.at(name);
      TITAN_CHECK(shards_[shard]->contains(tensor), "{}: tensor '{}' is mapped to '{}', which does not hold it", source,
                  tensor, name);
      where_[tensor] = shard;
    }
    // A tensor the index does not list would be silently skipped by Hugging Face's loaders: refuse it.
    for (const auto& shard : shards_) {
      for (const auto& entry : shard->header().entries) {
        TITAN_CHECK(where_.count(entry.name) != 0 && shards_[where_.at(entry.name)].get() == shard.get(),
                    "{}: tensor '{}' is not listed for this shard in {}", shard->path(), entry.name, kHfIndexFile);
      }
    }
    return;
  }
  const fs::path single = root / kHfSingleFile;
  TITAN_CHECK(fs::is_regular_file(single), "{}: neither {} nor {} is there", folder_, kHfSingleFile, kHfIndexFile);
  shards_.push_back(std::make_unique<checkpoint::SafetensorsReader>(single.string()));
  for (const auto& entry : shards_.front()->header().entries) where_[entry.name] = 0;
}

std::vector<std::string> HfWeightFiles::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, shard] : where_) names.push_back(name);
  return names;
}

const checkpoint::SafetensorsReader& HfWeightFiles::shard_of(const std::string& name) const {
  const auto found = where_.find(name);
  TITAN_CHECK(found != where_.end(), "{}: no tensor named '{}'", folder_, name);
  return *shards_[found->second];
}

}  // namespace titan::models
