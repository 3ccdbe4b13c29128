// model.safetensors.index.json: which shard file of a Hugging Face folder
// holds each tensor. Parsed apart from the file I/O so it can be fuzzed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace titan::models {

inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";
inline constexpr const char* kHfSingleFile = "model.safetensors";
// Older repos (and PyTorch-only writers) hold the weights as torch.save files.
inline constexpr const char* kHfTorchIndexFile = "pytorch_model.bin.index.json";
inline constexpr const char* kHfTorchSingleFile = "pytorch_model.bin";

struct HfIndex {
  uint64_t total_size = 0;                        // metadata.total_size: tensor bytes over all shards
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  // The shard files, each once, sorted.
  std::vector<std::string> files() const;
};

// Validates the structure and that every shard is a plain file name ending in
// `suffix` (no folders: an index never points outside its folder).
// `source` names the file in errors.
HfIndex parse_hf_index(std::string_view json_text, const std::string& source,
                       const std::string& suffix = ".safetensors");
std::string hf_index_json(const HfIndex& index);

}  // namespace titan::models
