// FLUX's text encoders loaded from Hugging Face folders
// (models/flux/text_encoder_folder.h): a folder holding the reference cases'
// weights under transformers' names and the config.json transformers writes
// for the tiny configurations gives the reference's hidden states (one file
// and sharded); a folder that does not match its config.json, and config.json
// values titan's encoders would compute differently, are refused naming the
// file and the key or tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/expect_error.h"
#include "support/model_checks.h"
#include "support/reference.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/flux/text_encoder_config_json.h"
#include "titan/models/flux/text_encoder_folder.h"
#include "titan/models/hf/hf_index.h"

namespace titan {
namespace t5_clip_folder_test {

using json = nlohmann::json;
namespace fs = std::filesystem;
using testing::expect_error;

class Folder {
 public:
  Folder() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("titan_t5_clip_folder_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~Folder() {
    std::error_code error;
    fs::remove_all(path_, error);
  }
  std::string str() const { return path_.string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
};

// T5Config as transformers writes it for tests/reference/t5_encoder.py's TINY.
json t5_config() {
  return {{"architectures", {"T5EncoderModel"}},
          {"model_type", "t5"},
          {"vocab_size", 100},
          {"d_model", 32},
          {"d_kv", 8},
          {"num_heads", 4},
          {"d_ff", 48},
          {"num_layers", 2},
          {"num_decoder_layers", 2},
          {"relative_attention_num_buckets", 8},
          {"relative_attention_max_distance", 20},
          {"layer_norm_epsilon", 1e-6},
          {"feed_forward_proj", "gated-gelu"},
          {"dense_act_fn", "gelu_new"},
          {"is_gated_act", true},
          {"torch_dtype", "float32"}};
}

// CLIPTextConfig for tests/reference/clip_text.py's TINY.
json clip_config() {
  return {{"architectures", {"CLIPTextModel"}},
          {"model_type", "clip_text_model"},
          {"vocab_size", 99},
          {"hidden_size", 32},
          {"intermediate_size", 48},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"max_position_embeddings", 16},
          {"layer_norm_eps", 1e-5},
          {"hidden_act", "quick_gelu"},
          {"projection_dim", 16},
          {"bos_token_id", 0},
          {"eos_token_id", 2},
          {"pad_token_id", 1}};
}

// The reference case's "param.<name>" tensors under <name>, plus `extra`.
checkpoint::NamedTensors weights_of(const testing::ReferenceCase& ref, const checkpoint::NamedTensors& extra = {}) {
  checkpoint::NamedTensors tensors;
  for (const std::string& name : ref.tensor_names()) {
    if (name.rfind("param.", 0) == 0) tensors.emplace_back(name.substr(6), ref.get(name));
  }
  tensors.insert(tensors.end(), extra.begin(), extra.end());
  return tensors;
}

void write_folder(const Folder& folder, const json& config, const checkpoint::NamedTensors& tensors,
                  bool sharded = false) {
  folder.write("config.json", config.dump(2));
  if (!sharded) {
    checkpoint::write_safetensors(folder.str() + "/model.safetensors", tensors);
    return;
  }
  // Two shards, every other tensor in each, and the index transformers writes.
  models::HfIndex index;
  checkpoint::NamedTensors parts[2];
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string file = fmt::format("model-0000{}-of-00002.safetensors", i % 2 + 1);
    parts[i % 2].push_back(tensors[i]);
    index.weight_map[tensors[i].first] = file;
    index.total_size += tensors[i].second.nbytes();
  }
  for (int s = 0; s < 2; ++s) {
    checkpoint::write_safetensors(folder.str() + fmt::format("/model-0000{}-of-00002.safetensors", s + 1), parts[s]);
  }
  folder.write("model.safetensors.index.json", models::hf_index_json(index));
}

TEST(T5ClipFolders, T5FolderGivesTheReferenceStates) {
  const testing::ReferenceCase ref("t5_tiny");
  for (const bool sharded : {false, true}) {
    Folder folder;
    // T5EncoderModel files may also hold the tied encoder.embed_tokens.weight.
    write_folder(folder, t5_config(),
                 weights_of(ref, {{"encoder.embed_tokens.weight", ref.get("param.shared.weight")}}), sharded);
    const auto model = models::flux::load_t5_encoder(folder.str());
    EXPECT_EQ(model->config.relative_attention_max_distance, 20);
    const Tensor hidden = model->forward(ref.get("input_ids"), ref.get("attention_mask"));
    const Tensor expected = ref.get("hidden");
    const testing::Tolerance tol = testing::tolerance_for(DType::f32, expected);
    EXPECT_TRUE(testing::all_close(hidden, expected, tol.atol, tol.rtol)) << "sharded " << sharded;
  }
}

TEST(T5ClipFolders, ClipFolderGivesTheReferenceStates) {
  const testing::ReferenceCase ref("clip_tiny");
  for (const bool sharded : {false, true}) {
    Folder folder;
    write_folder(folder, clip_config(), weights_of(ref), sharded);
    const models::flux::ClipTextOutput out =
        models::flux::load_clip_text_encoder(folder.str())->forward(ref.get("input_ids"));
    for (const auto& [name, actual] : {std::pair{"hidden", out.last_hidden_state}, std::pair{"pooled", out.pooled}}) {
      const Tensor expected = ref.get(name);
      const testing::Tolerance tol = testing::tolerance_for(DType::f32, expected);
      EXPECT_TRUE(testing::all_close(actual, expected, tol.atol, tol.rtol)) << name << " sharded " << sharded;
    }
  }
}

TEST(T5ClipFolders, Bf16Loading) {
  const testing::ReferenceCase ref("clip_tiny");
  Folder folder;
  write_folder(folder, clip_config(), weights_of(ref));
  const auto model = models::flux::load_clip_text_encoder(folder.str(), DType::bf16);
  const models::flux::ClipTextOutput out = model->forward(ref.get("input_ids"));
  EXPECT_EQ(out.pooled.dtype(), DType::bf16);
  EXPECT_LT(testing::relative_l2_error(out.pooled.to(DType::f32), ref.get("pooled")), 3e-2);
}

TEST(T5ClipFolders, MismatchedFoldersAreRefused) {
  const testing::ReferenceCase ref("t5_tiny");
  checkpoint::NamedTensors weights = weights_of(ref);
  {
    Folder folder;
    checkpoint::NamedTensors missing(weights.begin() + 1, weights.end());
    write_folder(folder, t5_config(), missing);
    expect_error([&] { models::flux::load_t5_encoder(folder.str()); }, {"no tensor", weights.front().first});
  }
  {
    Folder folder;
    write_folder(folder, t5_config(), weights_of(ref, {{"lm_head.weight", ref.get("param.shared.weight")}}));
    expect_error([&] { models::flux::load_t5_encoder(folder.str()); }, {"model.safetensors", "'lm_head.weight'"});
  }
  {
    Folder folder;
    json config = t5_config();
    config["d_ff"] = 64;  // the file's feed-forward is 48 wide
    write_folder(folder, config, weights);
    expect_error([&] { models::flux::load_t5_encoder(folder.str()); }, {"DenseReluDense", "shape"});
  }
  {
    Folder folder;
    expect_error([&] { models::flux::load_t5_encoder(folder.str()); }, {"missing config.json"});
    folder.write("config.json", t5_config().dump());
    expect_error([&] { models::flux::load_t5_encoder(folder.str()); }, {"model.safetensors"});
  }
}

TEST(T5ClipFolders, ConfigValuesTitanWouldComputeDifferentlyAreRefused) {
  using models::flux::parse_clip_text_config;
  using models::flux::parse_t5_encoder_config;
  const auto t5 = [](const char* key, const json& value) {
    json config = t5_config();
    config[key] = value;
    return config.dump();
  };
  expect_error([&] { parse_t5_encoder_config(t5("feed_forward_proj", "relu"), "t5/config.json"); },
               {"t5/config.json", "'feed_forward_proj'", "relu"});
  expect_error([&] { parse_t5_encoder_config(t5("dense_act_fn", "relu"), "t5/config.json"); }, {"'dense_act_fn'"});
  expect_error([&] { parse_t5_encoder_config(t5("model_type", "mt5"), "t5/config.json"); }, {"'model_type'", "mt5"});
  expect_error([&] { parse_t5_encoder_config(t5("d_model", -4), "t5/config.json"); }, {"'d_model'", "-4"});
  expect_error([&] { parse_t5_encoder_config(t5("d_kv", "8"), "t5/config.json"); }, {"'d_kv'"});
  expect_error([&] { parse_t5_encoder_config(t5("layer_norm_epsilon", -1e-6), "t5/config.json"); },
               {"'layer_norm_epsilon'"});
  expect_error([&] { parse_t5_encoder_config(t5("relative_attention_num_buckets", 7), "t5/config.json"); },
               {"t5/config.json", "even"});
  expect_error([&] { parse_t5_encoder_config("[1, 2]", "t5/config.json"); }, {"t5/config.json", "object"});
  expect_error([&] { parse_t5_encoder_config("{", "t5/config.json"); }, {"t5/config.json", "not valid JSON"});
  const auto clip = [](const char* key, const json& value) {
    json config = clip_config();
    config[key] = value;
    return config.dump();
  };
  expect_error([&] { parse_clip_text_config(clip("hidden_act", "gelu"), "clip/config.json"); },
               {"clip/config.json", "'hidden_act'", "gelu"});
  expect_error([&] { parse_clip_text_config(clip("eos_token_id", 49407), "clip/config.json"); },
               {"'eos_token_id'", "49407"});
  expect_error([&] { parse_clip_text_config(clip("model_type", "clip"), "clip/config.json"); },
               {"'model_type'", "clip_text_model"});
  expect_error([&] { parse_clip_text_config(clip("num_attention_heads", 5), "clip/config.json"); },
               {"clip/config.json", "multiple"});
  // The defaults fill absent keys, and the eos id may be the last id (newer configs).
  const auto parsed = parse_clip_text_config(clip("eos_token_id", 98), "clip/config.json");
  EXPECT_EQ(parsed.max_position_embeddings, 16);
  EXPECT_EQ(parse_t5_encoder_config(R"({"feed_forward_proj": "gated-gelu"})", "t5/config.json").d_model, 512);
}

}  // namespace t5_clip_folder_test
}  // namespace titan
