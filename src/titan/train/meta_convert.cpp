#include "titan/train/meta_convert.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include "titan/checkpoint/tensor_source.h"
#include "titan/checkpoint/torch_archive.h"
#include "titan/core/copy.h"
#include "titan/core/staging_folder.h"
#include "titan/models/hf/hf_config.h"
#include "titan/train/config_loader.h"
#include "titan/train/job_model_config.h"
#include "titan/train/model_export.h"

namespace titan::train {

namespace fs = std::filesystem;

std::string meta_params_to_hf_config(const std::string& params_json, const MetaShapes& shapes,
                                     const std::string& source) {
  nlohmann::json params;
  try {
    params = nlohmann::json::parse(params_json);
  } catch (const nlohmann::json::exception& error) {
    fail("{}: not valid JSON: {}", source, error.what());
  }
  TITAN_CHECK(params.is_object(), "{}: not a JSON object", source);
  const auto integer = [&](const char* key, int64_t fallback) -> int64_t {
    if (!params.contains(key) || params[key].is_null()) {
      TITAN_CHECK(fallback != 0, "{}: required key '{}' is missing", source, key);
      return fallback;
    }
    TITAN_CHECK(params[key].is_number_integer(), "{}: '{}' must be an integer, got {}", source, key,
                params[key].dump());
    return params[key].get<int64_t>();
  };
  const auto number = [&](const char* key, double fallback) -> double {
    if (!params.contains(key) || params[key].is_null()) return fallback;
    TITAN_CHECK(params[key].is_number(), "{}: '{}' must be a number, got {}", source, key, params[key].dump());
    return params[key].get<double>();
  };
  const int64_t heads = integer("n_heads", 0);
  int64_t vocab = integer("vocab_size", -1);
  // Llama 2's params.json says -1: the tokenizer (and the embedding) decide.
  if (vocab <= 0) vocab = shapes.vocab_size;
  TITAN_CHECK(vocab == shapes.vocab_size, "{}: vocab_size {} but the embedding has {} rows", source, vocab,
              shapes.vocab_size);
  const bool scaled = params.contains("use_scaled_rope") && params["use_scaled_rope"].is_boolean() &&
                      params["use_scaled_rope"].get<bool>();
  nlohmann::ordered_json hf;
  hf["architectures"] = {"LlamaForCausalLM"};
  hf["model_type"] = "llama";
  hf["hidden_size"] = integer("dim", 0);
  hf["intermediate_size"] = shapes.ffn_hidden;
  hf["num_hidden_layers"] = integer("n_layers", 0);
  hf["num_attention_heads"] = heads;
  hf["num_key_value_heads"] = integer("n_kv_heads", heads);
  hf["vocab_size"] = vocab;
  hf["rms_norm_eps"] = number("norm_eps", 1e-5);
  hf["rope_theta"] = number("rope_theta", 10000.0);
  hf["tie_word_embeddings"] = !shapes.has_output;
  hf["hidden_act"] = "silu";
  hf["torch_dtype"] = shapes.dtype;
  // Meta's Llama 3.1 scaling is fixed in its code (reference_impl apply_scaling):
  // factor 8, frequency band 1 to 4, original context 8192.
  hf["max_position_embeddings"] = scaled ? 131072 : 8192;
  if (scaled) {
    hf["rope_scaling"] = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  }
  return hf.dump(2) + "\n";
}

namespace {

// The model-parallel shards of a Meta folder, opened.
struct MetaShards {
  std::vector<std::unique_ptr<checkpoint::TorchArchive>> archives;
  // name -> each shard's record of it
  std::map<std::string, std::vector<checkpoint::TorchTensorRecord>> tensors;
};

MetaShards open_meta_shards(const fs::path& root) {
  std::map<int, fs::path> files;
  const std::regex pattern(R"(consolidated\.(\d\d)\.pth)");
  for (const auto& entry : fs::directory_iterator(root)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, pattern)) files[std::stoi(match[1].str())] = entry.path();
  }
  TITAN_CHECK(!files.empty(), "{}: no consolidated.00.pth (not a Meta Llama checkpoint folder?)", root.string());
  TITAN_CHECK(files.rbegin()->first + 1 == static_cast<int>(files.size()),
              "{}: the consolidated.NN.pth shards are not numbered 00 to {:02}", root.string(), files.size() - 1);
  MetaShards shards;
  for (const auto& [rank, path] : files) {
    shards.archives.push_back(std::make_unique<checkpoint::TorchArchive>(path.string()));
    for (auto& [name, record] : shards.archives.back()->state_dict_tensors()) {
      if (name == "rope.freqs") continue;  // Llama 2 kept its RoPE table; titan computes it
      auto& ranks = shards.tensors[name];
      TITAN_CHECK(ranks.size() == static_cast<size_t>(rank), "{}: tensor '{}' is not in every earlier shard",
                  path.string(), name);
      ranks.push_back(std::move(record));
    }
  }
  for (const auto& [name, ranks] : shards.tensors) {
    TITAN_CHECK(ranks.size() == files.size(), "{}: tensor '{}' is in {} of the {} shards", root.string(), name,
                ranks.size(), files.size());
  }
  return shards;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The dimension Meta split `name` along across ranks; -1: whole in every shard.
int split_dimension(const std::string& name, const Shape& piece, int64_t dim) {
  if (ends_with(name, "norm.weight")) return -1;
  if (ends_with(name, "attention.wo.weight") || ends_with(name, "feed_forward.w2.weight")) return 1;
  // Llama 2 split the embedding by columns, Llama 3 by rows (vocabulary-parallel).
  if (name == "tok_embeddings.weight" && piece.size() == 2 && piece[1] != dim) return 1;
  return 0;
}

Shape joined_shape(const std::string& name, const std::vector<checkpoint::TorchTensorRecord>& ranks, int split,
                   const std::string& folder) {
  Shape shape(ranks.front().shape.begin(), ranks.front().shape.end());
  for (size_t r = 1; r < ranks.size(); ++r) {
    TITAN_CHECK(ranks[r].shape == ranks.front().shape && ranks[r].dtype == ranks.front().dtype,
                "{}: tensor '{}' differs in shape or dtype between shards 0 and {}", folder, name, r);
  }
  if (split >= 0) {
    TITAN_CHECK(static_cast<size_t>(split) < shape.size(), "{}: tensor '{}' of shape {} has no dimension {} to join",
                folder, name, shape_str(shape), split);
    shape[static_cast<size_t>(split)] *= static_cast<int64_t>(ranks.size());
  }
  return shape;
}

// Copies rank `rank`'s piece into `whole` at its place along `split`.
void place_piece(const Tensor& piece, Tensor& whole, int split, size_t rank) {
  const Shape& shape = piece.shape();
  int64_t outer = 1;
  for (int d = 0; d < split; ++d) outer *= shape[static_cast<size_t>(d)];
  const size_t run = static_cast<size_t>(piece.numel() / std::max<int64_t>(outer, 1)) * dtype_size(piece.dtype());
  const size_t whole_run = run * static_cast<size_t>(whole.shape()[static_cast<size_t>(split)] /
                                                     std::max<int64_t>(shape[static_cast<size_t>(split)], 1));
  const auto* from = static_cast<const char*>(piece.data_ptr());
  auto* to = static_cast<char*>(whole.data_ptr()) + rank * run;
  for (int64_t i = 0; i < outer; ++i) std::memcpy(to + static_cast<size_t>(i) * whole_run, from + i * run, run);
}

Tensor cast_to(const Tensor& tensor, DType dtype) { return tensor.dtype() == dtype ? tensor : tensor.to(dtype); }

}  // namespace

void convert_meta_to_titan(const std::string& meta_folder, const std::string& output, const ConvertOptions& options) {
  const fs::path root(meta_folder);
  const fs::path params_path = root / "params.json";
  TITAN_CHECK(fs::is_regular_file(params_path), "{}: missing params.json (not a Meta Llama checkpoint folder?)",
              meta_folder);
  std::ifstream params_file(params_path);
  const std::string params((std::istreambuf_iterator<char>(params_file)), std::istreambuf_iterator<char>());
  const auto shards = std::make_shared<MetaShards>(open_meta_shards(root));
  const auto& tensors = shards->tensors;
  const auto tensor = [&](const std::string& name) -> const std::vector<checkpoint::TorchTensorRecord>& {
    const auto found = tensors.find(name);
    TITAN_CHECK(found != tensors.end(), "{}: no tensor '{}' in consolidated.00.pth", meta_folder, name);
    return found->second;
  };
  // The model width, from the final norm (whole in every shard); params.json is checked against it later.
  const std::vector<int64_t>& norm_shape = tensor("norm.weight").front().shape;
  TITAN_CHECK(norm_shape.size() == 1, "{}: norm.weight has shape {}, not [dim]", meta_folder, shape_str(norm_shape));
  const int64_t dim = norm_shape[0];
  const auto& embedding = tensor("tok_embeddings.weight");
  MetaShapes shapes;
  shapes.vocab_size = joined_shape("tok_embeddings.weight", embedding,
                                   split_dimension("tok_embeddings.weight", embedding.front().shape, dim), meta_folder)
                          .at(0);
  shapes.ffn_hidden =
      joined_shape("layers.0.feed_forward.w1.weight", tensor("layers.0.feed_forward.w1.weight"), 0, meta_folder).at(0);
  shapes.has_output = tensors.count("output.weight") != 0;
  shapes.dtype = models::hf_dtype_name(embedding.front().dtype);

  // The config.json the export carries, made in a scratch folder never published.
  const StagingFolder scratch(fs::path(output).string() + ".meta-config");
  const fs::path config_json = scratch.path() / "config.json";
  {
    std::ofstream file(config_json);
    file << meta_params_to_hf_config(params, shapes, params_path.string());
    TITAN_CHECK(file.good(), "cannot write '{}'", config_json.string());
  }
  JobConfig config;
  config.model.hf_config = config_json.string();
  const models::DecoderConfig decoder = resolve_model_config(config, 0);
  config.model.vocab_size = decoder.vocab_size;
  if (fs::is_regular_file(root / "tokenizer.model")) config.model.tokenizer_path = (root / "tokenizer.model").string();

  checkpoint::TensorSources sources;
  std::set<std::string> used;
  const auto model = decoder.build(Device::meta());  // names and shapes only
  for (auto& [name, expected] : model->named_state()) {
    const auto& ranks = tensor(name);
    const int split = split_dimension(name, ranks.front().shape, dim);
    const Shape shape = joined_shape(name, ranks, split, meta_folder);
    TITAN_CHECK(shape == expected.shape(), "{}: tensor '{}' joins to shape {}, but params.json implies {}", meta_folder,
                name, shape_str(shape), shape_str(expected.shape()));
    const DType stored = ranks.front().dtype;
    const DType dtype = options.dtype.value_or(stored);
    sources.push_back({name, dtype, shape, [shards, tensor_name = name, split, shape, stored, dtype] {
                         const auto& pieces = shards->tensors.at(tensor_name);
                         // Whole in every shard (split < 0): the first is it.
                         if (split < 0) return cast_to(shards->archives[0]->read_record(pieces[0]), dtype);
                         Tensor whole = Tensor::empty(shape, stored);
                         for (size_t r = 0; r < pieces.size(); ++r) {
                           place_piece(shards->archives[r]->read_record(pieces[r]), whole, split, r);
                         }
                         return cast_to(whole, dtype);
                       }});
    used.insert(name);
  }
  for (const auto& [name, ranks] : tensors) {
    TITAN_CHECK(used.count(name) != 0, "{}: tensor '{}' is not part of the Llama model params.json describes",
                meta_folder, name);
  }
  write_converted_export(meta_folder, output, config, decoder, std::move(sources), options);
}

}  // namespace titan::train
