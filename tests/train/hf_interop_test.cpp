// Hugging Face interop end to end: titan -> HF -> titan is bitwise identical
// (every family, tied and untied, f32 and bf16, one file and sharded, Phi-3's
// fused tensors split and joined again); the tensors titan writes have
// exactly transformers' names; HF folders titan writes give, in an
// independent PyTorch reading of the HF format (tests/reference/hf_logits.py,
// hf_families.py), the logits and loss titan computes; titan
// reads shards another writer laid out; model.hf_config builds the model;
// `titan convert` refuses bad input with errors naming file and tensor, and
// leaves existing folders alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "data/peer_support.h"
#include "support/reference.h"
#include "titan/autograd/grad_mode.h"
#include "titan/models/decoder_config_diff.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/hf/hf_index.h"
#include "titan/models/hf/hf_weights.h"
#include "titan/models/model_spec.h"
#include "titan/ops/random.h"
#include "titan/train/job_model_config.h"
#include "titan/train/model_export.h"
#include "titan/train/trainer.h"

namespace titan {
namespace hf_interop_test {

namespace fs = std::filesystem;
using data::testing::read_bytes;
using data::testing::run_command;
using data::testing::run_titan;
using data::testing::shell_quote;
using data::testing::TempDir;
using data::testing::write_bytes;

struct HfCase {
  std::string model;
  bool tied;
  std::string name;
};
void PrintTo(const HfCase& c, std::ostream* out) { *out << c.name; }

// Llama and Qwen 3 (reference: tests/reference/hf_logits.py), and the newer
// families (reference: tests/reference/hf_families.py).
const std::vector<HfCase> kLlamaQwenCases{
    {"llama3", false, "llama3_untied"}, {"llama3", true, "llama3_tied_gqa_scaled"}, {"qwen3", true, "qwen3_tied"},
    {"qwen3", false, "qwen3_untied"},   {"qwen3_moe", false, "qwen3_moe_untied"},
};
const std::vector<HfCase> kNewerCases{
    {"mistral", false, "mistral"},   {"qwen2", true, "qwen2_tied"}, {"gemma2", true, "gemma2_tied"},
    {"gemma3", true, "gemma3_tied"}, {"olmo2", false, "olmo2"},     {"phi3", false, "phi3"},
};
std::vector<HfCase> all_cases() {
  std::vector<HfCase> cases = kLlamaQwenCases;
  cases.insert(cases.end(), kNewerCases.begin(), kNewerCases.end());
  return cases;
}

bool newer_family(const std::string& model) {
  for (const HfCase& c : kNewerCases) {
    if (c.model == model) return true;
  }
  return false;
}

// Two-layer versions of the debug models (qwen3_moe's: a dense layer, then a
// mixture of experts; gemma3's three: local, local, global). The tied llama
// also has grouped heads and llama3 RoPE scaling whose bands (original context
// 64) put its frequencies in all three regimes: kept, divided, smoothed.
// Windows shrink to 5 so that they matter in 24-token sequences.
models::DecoderConfig small_config(const HfCase& c) {
  models::DecoderConfig config = models::model_config(c.model, "debugmodel", 256);
  config.layers.resize(c.model == "gemma3" ? 3 : 2);
  if (c.model == "gemma3") {
    config.layers[2].attention.sliding_window = 0;
    config.layers[2].attention.local_rope = false;
  }
  config.edit_layers([](nn::TransformerBlockConfig& layer) {
    if (layer.attention.sliding_window > 0) layer.attention.sliding_window = 5;
  });
  config.tie_embeddings = c.tied;
  config.max_seq_len = 64;
  if (c.model == "llama3" && c.tied) {
    config.edit_layers([](nn::TransformerBlockConfig& layer) { layer.attention.n_kv_heads = 4; });
    config.rope_scaling = {.type = ops::RopeScalingType::llama3, .factor = 8.0, .original_max_position = 64};
  }
  return config;
}

// Random weights; norms away from 1 (Gemma's 1 + w: w away from 0) and biases
// away from 0, so that their mapping matters.
std::shared_ptr<models::Decoder> random_model(const models::DecoderConfig& config, uint64_t seed) {
  auto model = config.build();
  Generator generator(seed);
  model->init_weights(generator);
  for (auto& [name, parameter] : model->named_parameters()) {
    if (name.find("norm") != std::string::npos) ops::uniform_(parameter->data, 0.5, 1.5, generator);
    if (name.ends_with(".bias")) ops::uniform_(parameter->data, -0.5, 0.5, generator);
  }
  return model;
}

// transformers' parameter names of a family's model with `layers` layers
// (modeling_<family>.py), written out here apart from titan's name table.
std::set<std::string> transformers_names(const std::string& model, int64_t layers, bool tied) {
  std::set<std::string> names{"model.embed_tokens.weight", "model.norm.weight"};
  if (!tied) names.insert("lm_head.weight");
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    std::vector<std::string> layer{"self_attn.o_proj.weight", "mlp.down_proj.weight"};
    if (model == "phi3") {
      layer.insert(layer.end(), {"self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"});
    } else {
      layer.insert(layer.end(), {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                 "mlp.gate_proj.weight", "mlp.up_proj.weight"});
    }
    if (model == "qwen2") {
      layer.insert(layer.end(), {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"});
    }
    if (model == "gemma3" || model == "olmo2")
      layer.insert(layer.end(), {"self_attn.q_norm.weight", "self_attn.k_norm.weight"});
    if (model == "gemma2" || model == "gemma3") {
      layer.insert(layer.end(), {"input_layernorm.weight", "post_attention_layernorm.weight",
                                 "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"});
    } else if (model == "olmo2") {
      layer.insert(layer.end(), {"post_attention_layernorm.weight", "post_feedforward_layernorm.weight"});
    } else {
      layer.insert(layer.end(), {"input_layernorm.weight", "post_attention_layernorm.weight"});
    }
    for (const std::string& name : layer) names.insert(p + name);
  }
  return names;
}

// Everything the model saves: weights in `dtype`, and the MoE expert bias as
// it is (f32; HF folders leave it out while it is zero and read it back as zero).
checkpoint::NamedTensors named_state(models::Decoder& model, DType dtype) {
  checkpoint::NamedTensors tensors;
  for (auto& [name, parameter] : model.named_parameters()) tensors.emplace_back(name, parameter->data.to(dtype));
  for (auto& [name, buffer] : model.named_persistent_buffers()) tensors.emplace_back(name, *buffer);
  return tensors;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

void expect_same_state(const checkpoint::NamedTensors& expected, const std::map<std::string, Tensor>& actual) {
  EXPECT_EQ(actual.size(), expected.size());
  for (const auto& [name, tensor] : expected) {
    auto found = actual.find(name);
    ASSERT_NE(found, actual.end()) << name;
    EXPECT_TRUE(bitwise_equal(found->second, tensor)) << name;
  }
}

void write_config_json(const fs::path& path, const std::string& model, const models::DecoderConfig& config) {
  write_bytes(path, models::hf_config_json(models::hf_config_from_decoder(model, config, DType::f32)));
}

class HfInterop : public ::testing::TestWithParam<HfCase> {};

TEST_P(HfInterop, TitanToHfToTitanIsBitwise) {
  const HfCase& c = GetParam();
  const models::DecoderConfig config = small_config(c);
  auto model = random_model(config, 5);
  TempDir dir;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (uint64_t shard_bytes : {uint64_t{1} << 30, uint64_t{100000}}) {
      SCOPED_TRACE(fmt::format("{} shards of {} bytes", dtype_name(dtype), shard_bytes));
      const checkpoint::NamedTensors state = named_state(*model, dtype);
      const fs::path folder = dir / "hf";
      models::write_hf_folder(folder.string(), c.model, config, state, {dtype, shard_bytes, {}});
      const bool sharded = shard_bytes < (uint64_t{1} << 30);
      EXPECT_EQ(fs::exists(folder / models::kHfIndexFile), sharded);
      EXPECT_EQ(fs::exists(folder / models::kHfSingleFile), !sharded);
      EXPECT_FALSE(fs::exists(dir / "hf.partial"));
      const models::HfFolderReader reader(folder.string());
      EXPECT_EQ(reader.contains("lm_head.weight"), !c.tied);  // HF omits it when tied
      EXPECT_EQ(reader.config().torch_dtype, models::hf_dtype_name(dtype));
      if (sharded) {
        const auto index = models::parse_hf_index(read_bytes(folder / models::kHfIndexFile), "index");
        EXPECT_GT(index.files().size(), 2u);
      }
      expect_same_state(state, models::read_hf_weights(reader, models::decoder_config_from_hf(reader.config())));
      if (newer_family(c.model)) {
        const auto names = reader.tensor_names();
        EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
                  transformers_names(c.model, config.n_layers(), c.tied));
      }
    }
  }
}

// Phi-3's fused tensors hold titan's rows in transformers' order: qkv_proj is
// q's rows, then k's, then v's; gate_up_proj gate's, then up's.
TEST(HfInteropFused, Phi3TensorsAreTitansRowsStacked) {
  const models::DecoderConfig config = small_config({"phi3", false, "phi3"});
  auto model = random_model(config, 3);
  TempDir dir;
  models::write_hf_folder((dir / "hf").string(), "phi3", config, named_state(*model, DType::f32),
                          {DType::f32, uint64_t{1} << 30, {}});
  const models::HfFolderReader reader((dir / "hf").string());
  const auto& a = config.layers.front().attention;
  const int64_t q_rows = a.n_heads * a.head_size(), kv_rows = a.kv_heads() * a.head_size();
  const Tensor qkv = reader.read("model.layers.1.self_attn.qkv_proj.weight");
  ASSERT_EQ(qkv.size(0), q_rows + 2 * kv_rows);
  const auto& attention = *(*model->layers)[1]->attention;
  EXPECT_TRUE(bitwise_equal(qkv.narrow(0, 0, q_rows).contiguous(), attention.wq->weight->data));
  EXPECT_TRUE(bitwise_equal(qkv.narrow(0, q_rows, kv_rows).contiguous(), attention.wk->weight->data));
  EXPECT_TRUE(bitwise_equal(qkv.narrow(0, q_rows + kv_rows, kv_rows).contiguous(), attention.wv->weight->data));
  const Tensor gate_up = reader.read("model.layers.1.mlp.gate_up_proj.weight");
  const auto& ffn = *(*model->layers)[1]->feed_forward;
  const int64_t hidden = ffn.w1->weight->data.size(0);
  ASSERT_EQ(gate_up.size(0), 2 * hidden);
  EXPECT_TRUE(bitwise_equal(gate_up.narrow(0, 0, hidden).contiguous(), ffn.w1->weight->data));
  EXPECT_TRUE(bitwise_equal(gate_up.narrow(0, hidden, hidden).contiguous(), ffn.w3->weight->data));
}

class HfLogits : public ::testing::TestWithParam<HfCase> {};

TEST_P(HfLogits, PyTorchReadingOfTheHfFolderGivesTitansLogits) {
  const HfCase& c = GetParam();
  const models::DecoderConfig config = small_config(c);
  auto model = random_model(config, 9);
  TempDir dir;
  const checkpoint::NamedTensors state = named_state(*model, DType::f32);
  models::write_hf_folder((dir / "hf").string(), c.model, config, state,
                          {DType::f32, c.tied ? uint64_t{1} << 30 : uint64_t{200000}, {}});
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 2 * 24; ++i) ids.push_back((i * 37 + 11) % config.vocab_size);
  const Tensor input_ids = Tensor::from_vector(ids, {2, 24});
  checkpoint::write_safetensors((dir / "inputs.safetensors").string(), {{"input_ids", input_ids}});
  const auto run = run_command(
      std::string(TITAN_PYTHON) + " " + shell_quote(std::string(TITAN_REFERENCE_SCRIPTS_DIR) + "/hf_logits.py") + " " +
      shell_quote((dir / "hf").string()) + " " + shell_quote((dir / "inputs.safetensors").string()) + " " +
      shell_quote((dir / "logits.safetensors").string()) + " " + shell_quote((dir / "resaved").string()));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Tensor expected = checkpoint::SafetensorsReader((dir / "logits.safetensors").string()).read("logits");

  autograd::NoGradGuard no_grad;
  const Tensor logits = model->logits({input_ids, {}, {}});
  // The reference runs in float64 from the same f32 weights; titan's f32 logits
  // through two blocks carry a few dozen roundings, well inside 2e-5 of their
  // scale (the op-level tolerance of tests/support/reference.h).
  const auto tol = testing::tolerance_for(DType::f32, expected);
  EXPECT_TRUE(testing::all_close(logits, expected, tol.atol, tol.rtol));
  if (c.model == "llama3") {
    // The check can fail: without the q/k permutation (HF rotating titan's
    // interleaved rows as halves) the logits are far off.
    models::DecoderConfig unpermuted = config;
    unpermuted.edit_layers(
        [](nn::TransformerBlockConfig& layer) { layer.attention.rope_style = ops::RopeStyle::half; });
    auto wrong = unpermuted.build();
    std::map<std::string, Tensor> weights;
    for (const auto& [name, tensor] : state) weights[name] = tensor;
    wrong->load_state_dict(weights);
    EXPECT_GT(testing::relative_l2_error(wrong->logits({input_ids, {}, {}}), expected), 1e-3);
  }

  // Another writer's layout (one shard per layer, its own file names) reads back bit for bit.
  const models::HfFolderReader resaved((dir / "resaved").string());
  EXPECT_EQ(models::parse_hf_index(read_bytes(dir / "resaved" / models::kHfIndexFile), "i").files().size(), 3u);
  expect_same_state(state, models::read_hf_weights(resaved, config));
  auto loaded = config.build();
  models::load_hf_weights_into(*loaded, (dir / "resaved").string());
  EXPECT_EQ(loaded->logits({input_ids, {}, {}}).to_floats(), logits.to_floats());
}

// The newer families: tests/reference/hf_families.py (plain PyTorch from the
// formats' definitions) reads the folder titan wrote and computes the logits
// and loss titan computes, windows, soft-caps, norms and fused tensors included.
class HfFamilyLogits : public ::testing::TestWithParam<HfCase> {};

TEST_P(HfFamilyLogits, PyTorchReadingOfTheHfFolderGivesTitansLogitsAndLoss) {
  const HfCase& c = GetParam();
  const std::string script = std::string(TITAN_REFERENCE_SCRIPTS_DIR) + "/hf_families.py";
  const models::DecoderConfig config = small_config(c);
  auto model = random_model(config, 9);
  TempDir dir;
  const checkpoint::NamedTensors state = named_state(*model, DType::f32);
  models::write_hf_folder((dir / "hf").string(), c.model, config, state, {DType::f32, uint64_t{200000}, {}});
  std::vector<int64_t> ids, labels;
  for (int64_t i = 0; i < 2 * 24; ++i) ids.push_back((i * 37 + 11) % config.vocab_size);
  for (int64_t i = 0; i < 2 * 24; ++i) labels.push_back(i % 7 == 3 ? -100 : (i * 53 + 5) % config.vocab_size);
  const Tensor input_ids = Tensor::from_vector(ids, {2, 24});
  const Tensor label_ids = Tensor::from_vector(labels, {2, 24});
  checkpoint::write_safetensors((dir / "inputs.safetensors").string(),
                                {{"input_ids", input_ids}, {"labels", label_ids}});
  const auto run = run_command(
      std::string(TITAN_PYTHON) + " " + shell_quote(script) + " forward " + shell_quote((dir / "hf").string()) + " " +
      shell_quote((dir / "inputs.safetensors").string()) + " " + shell_quote((dir / "out.safetensors").string()));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const checkpoint::SafetensorsReader out((dir / "out.safetensors").string());
  const Tensor expected = out.read("logits");

  autograd::NoGradGuard no_grad;
  const Tensor logits = model->logits({input_ids, {}, {}});
  // The reference runs in float64 from the same f32 weights; titan's f32 logits
  // through two or three blocks carry a few dozen roundings, inside the
  // op-level f32 tolerance of tests/support/reference.h.
  const auto tol = testing::tolerance_for(DType::f32, expected);
  EXPECT_TRUE(testing::all_close(logits, expected, tol.atol, tol.rtol));
  const float loss = model->loss({input_ids, {}, {}}, label_ids).to_floats().front();
  const float expected_loss = out.read("loss").to_floats().front();
  // A mean of 40-odd f32 cross-entropies: relative 1e-5 covers their rounding.
  EXPECT_NEAR(loss, expected_loss, 1e-5 * std::abs(expected_loss) + 1e-6);
}

// titan export (built through model.hf_config) -> `titan convert` to HF and
// back: the same tensors bit for bit, and the reloaded export computes the
// same logits.
TEST_P(HfInterop, ConvertCommandRoundTrip) {
  const HfCase& c = GetParam();
  const models::DecoderConfig config = small_config(c);
  auto model = random_model(config, 13);
  TempDir dir;
  write_config_json(dir / "config.json", c.model, config);
  train::JobConfig job;
  job.model.hf_config = (dir / "config.json").string();
  job.model.vocab_size = config.vocab_size;
  job.training.seq_len = 32;
  train::resolve_model_config(job, job.model.vocab_size);
  EXPECT_EQ(job.model.name, c.model);
  EXPECT_EQ(job.model.flavor, "custom");
  train::export_model(*model, job, (dir / "export").string(), DType::f32);

  const auto q = [&](const char* name) { return shell_quote((dir / name).string()); };
  auto to_hf = run_titan("convert --from titan " + q("export") + " --to hf " + q("hf") + " --max-shard-size 150KB");
  ASSERT_EQ(to_hf.exit_code, 0) << to_hf.output;
  EXPECT_TRUE(fs::exists(dir / "hf" / models::kHfIndexFile));
  auto back = run_titan("convert --from hf " + q("hf") + " --to titan " + q("back"));
  ASSERT_EQ(back.exit_code, 0) << back.output;
  const checkpoint::SafetensorsReader original((dir / "export" / "model.safetensors").string());
  const checkpoint::SafetensorsReader converted((dir / "back" / "model.safetensors").string());
  ASSERT_EQ(converted.header().entries.size(), original.header().entries.size());
  for (const auto& entry : original.header().entries) {
    EXPECT_TRUE(bitwise_equal(converted.read(entry.name), original.read(entry.name))) << entry.name;
  }
  train::ExportedModel reloaded = train::load_exported_model((dir / "back").string());
  EXPECT_EQ(reloaded.config.model.name, c.model);
  autograd::NoGradGuard no_grad;
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 200}, {1, 6});
  EXPECT_EQ(reloaded.model->logits({ids, {}, {}}).to_floats(), model->logits({ids, {}, {}}).to_floats());

  // --dtype bf16 on the way out: the same as rounding titan's weights to bf16.
  auto bf16 = run_titan("convert --from titan " + q("export") + " --to hf " + q("hf16") + " --dtype bf16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  const models::HfFolderReader reader((dir / "hf16").string());
  EXPECT_EQ(reader.config().torch_dtype, "bfloat16");
  expect_same_state(named_state(*model, DType::bf16), models::read_hf_weights(reader, config));
}

const auto case_name = [](const auto& info) { return info.param.name; };
INSTANTIATE_TEST_SUITE_P(Families, HfInterop, ::testing::ValuesIn(all_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Families, HfLogits, ::testing::ValuesIn(kLlamaQwenCases), case_name);
INSTANTIATE_TEST_SUITE_P(Families, HfFamilyLogits, ::testing::ValuesIn(kNewerCases), case_name);

void expect_failure(const data::testing::CommandResult& result, std::initializer_list<std::string> fragments) {
  EXPECT_NE(result.exit_code, 0) << result.output;
  for (const auto& fragment : fragments) {
    EXPECT_NE(result.output.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << result.output;
  }
}

TEST(HfConvert, BadInputIsAClearErrorAndOverwritesNothing) {
  const HfCase c{"llama3", false, "llama3"};
  const models::DecoderConfig config = small_config(c);
  auto model = random_model(config, 17);
  TempDir dir;
  const checkpoint::NamedTensors state = named_state(*model, DType::f32);
  const fs::path good = dir / "good";
  models::write_hf_folder(good.string(), c.model, config, state, {DType::f32, 150000, {}});
  // An existing output with something in it: no failure may touch it, even with --force.
  fs::create_directories(dir / "out");
  write_bytes(dir / "out" / "keep.txt", "keep");
  const auto convert = [&](const fs::path& source) {
    return run_titan("convert --from hf " + shell_quote(source.string()) + " --to titan " +
                     shell_quote((dir / "out").string()) + " --force");
  };
  const auto variant = [&](const std::string& name) {
    const fs::path folder = dir / name;
    fs::copy(good, folder, fs::copy_options::recursive);
    return folder;
  };
  const std::string index = models::kHfIndexFile;

  fs::path bad = variant("architecture");
  std::string json = read_bytes(good / "config.json");
  json.replace(json.find("LlamaForCausalLM"), std::strlen("LlamaForCausalLM"), "MixtralForCausalLM");
  write_bytes(bad / "config.json", json);
  expect_failure(convert(bad), {(bad / "config.json").string(), "unsupported architecture 'MixtralForCausalLM'"});

  bad = variant("shape");
  json = read_bytes(good / "config.json");
  json.replace(json.find("\"intermediate_size\": 768"), std::strlen("\"intermediate_size\": 768"),
               "\"intermediate_size\": 640");
  write_bytes(bad / "config.json", json);
  expect_failure(convert(bad), {"model.layers.0.mlp.gate_proj.weight", "has shape [768, 256]", ".safetensors"});

  bad = dir / "missing";
  fs::create_directories(bad);
  fs::copy_file(good / "config.json", bad / "config.json");
  checkpoint::NamedTensors hf_tensors;
  Tensor left_out;
  for (const auto& [name, tensor] : state) {
    if (name == "layers.1.feed_forward.w3.weight") {
      left_out = tensor;
    } else {
      hf_tensors.emplace_back(models::hf_tensor_name(models::hf_family_for_model(c.model), name), tensor);
    }
  }
  checkpoint::write_safetensors((bad / "model.safetensors").string(), hf_tensors, {{"format", "pt"}});
  expect_failure(convert(bad), {bad.string(), "missing tensor 'model.layers.1.mlp.up_proj.weight'"});

  hf_tensors.emplace_back("model.layers.1.mlp.up_proj.weight", left_out);
  hf_tensors.emplace_back("model.layers.1.self_attn.q_proj.bias", left_out);
  checkpoint::write_safetensors((bad / "model.safetensors").string(), hf_tensors, {{"format", "pt"}});
  expect_failure(convert(bad), {"model.safetensors", "unexpected tensor 'model.layers.1.self_attn.q_proj.bias'"});

  bad = variant("truncated_index");
  const std::string index_text = read_bytes(good / index);
  write_bytes(bad / index, index_text.substr(0, index_text.size() / 2));
  expect_failure(convert(bad), {(bad / index).string(), "not valid JSON"});

  bad = variant("escaping_index");
  std::string escaping = index_text;
  const size_t first_shard = escaping.find("model-00001-of-");
  escaping.replace(first_shard, std::strlen("model-00001"), "../good/model-00001");
  write_bytes(bad / index, escaping);
  expect_failure(convert(bad), {(bad / index).string(), "not a .safetensors file in this folder"});

  bad = variant("misplaced_index");
  std::string misplaced = index_text;
  const size_t entry = misplaced.find("\"model.norm.weight\": \"model-");
  ASSERT_NE(entry, std::string::npos) << misplaced;
  misplaced.replace(misplaced.find("-of-", entry) - 5, 5, "00001");
  write_bytes(bad / index, misplaced);
  expect_failure(convert(bad), {"tensor 'model.norm.weight' is mapped to 'model-00001-of-"});

  bad = variant("missing_shard");
  fs::remove(bad / ("model-00002-of-" + index_text.substr(index_text.find("-of-") + 4, 5) + ".safetensors"));
  expect_failure(convert(bad), {(bad / index).string(), "shard 'model-00002-of-", "does not exist"});

  EXPECT_EQ(read_bytes(dir / "out" / "keep.txt"), "keep");
  EXPECT_FALSE(fs::exists(dir / "out.partial"));
  expect_failure(run_titan("convert --from hf " + shell_quote(good.string()) + " --to titan " +
                           shell_quote((dir / "out").string())),
                 {"exists (pass --force to replace it)"});
  expect_failure(
      run_titan("convert --from hf " + shell_quote(good.string()) + " --to hf " + shell_quote((dir / "o2").string())),
      {"both 'hf'"});
  EXPECT_EQ(read_bytes(dir / "out" / "keep.txt"), "keep");

  // The titan side: a tensor whose shape does not fit the export's job.toml.
  write_config_json(dir / "config.json", c.model, config);
  train::JobConfig job;
  job.model.hf_config = (dir / "config.json").string();
  job.model.vocab_size = config.vocab_size;
  train::export_model(*model, job, (dir / "export").string(), DType::f32);
  checkpoint::NamedTensors titan_tensors = state;
  titan_tensors[3].second = titan_tensors[3].second.narrow(0, 0, 8).contiguous();
  checkpoint::write_safetensors((dir / "export" / "model.safetensors").string(), titan_tensors);
  expect_failure(run_titan("convert --from titan " + shell_quote((dir / "export").string()) + " --to hf " +
                           shell_quote((dir / "out").string()) + " --force"),
                 {"model.safetensors", "tensor '" + titan_tensors[3].first + "' has shape [8, "});
  EXPECT_EQ(read_bytes(dir / "out" / "keep.txt"), "keep");

  // A successful --force replaces the folder whole.
  const auto replaced = convert(good);
  ASSERT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_FALSE(fs::exists(dir / "out" / "keep.txt"));
  EXPECT_TRUE(fs::exists(dir / "out" / "job.toml"));
}

TEST(HfConvert, LoadIntoAModelOfAnotherShapeListsTheDifferences) {
  const HfCase c{"qwen3", true, "qwen3"};
  const models::DecoderConfig config = small_config(c);
  auto model = random_model(config, 21);
  TempDir dir;
  models::write_hf_folder((dir / "hf").string(), c.model, config, named_state(*model, DType::f32),
                          {DType::f32, uint64_t{1} << 30, {}});
  models::DecoderConfig other = config;
  other.layers.resize(3, other.layers.front());
  other.rope_theta = 5.0;
  auto target = other.build();
  try {
    models::load_hf_weights_into(*target, (dir / "hf").string());
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("config.json"), std::string::npos) << message;
    EXPECT_NE(message.find("n_layers: 2 vs 3"), std::string::npos) << message;
    EXPECT_NE(message.find("rope_theta"), std::string::npos) << message;
  }
}

// model.hf_config in a job config: the trainer builds that model (family and
// shape from config.json, vocabulary from it too) and trains it.
TEST(HfConvert, TrainerBuildsTheModelOfHfConfig) {
  TempDir dir;
  models::DecoderConfig config = small_config({"qwen3", false, "qwen3"});
  config.vocab_size = 300;
  write_config_json(dir / "config.json", "qwen3", config);
  train::JobConfig job;
  job.model.name = "llama3";  // replaced by the config's family
  job.model.hf_config = (dir / "config.json").string();
  job.job.dump_folder = (dir / "run").string();
  job.training.seq_len = 16;
  job.training.local_batch_size = 2;
  job.training.steps = 2;
  job.metrics.peak_tflops = 1.0;
  job.metrics.progress = false;
  auto generator = std::make_shared<Generator>(3);
  train::Trainer trainer(job, [generator] {
    Tensor values = Tensor::empty({2, 17});
    ops::uniform_(values, 0.0, 300.0, *generator);
    std::vector<int64_t> ids;
    for (float v : values.to_floats()) ids.push_back(static_cast<int64_t>(v));
    const Tensor all = Tensor::from_vector(ids, {2, 17});
    data::Batch batch;
    batch.input_ids = all.narrow(1, 0, 16).contiguous();
    batch.labels = all.narrow(1, 1, 16).contiguous();
    return batch;
  });
  EXPECT_EQ(trainer.config().model.name, "qwen3");
  EXPECT_TRUE(models::decoder_config_differences(trainer.model().config, config).empty());
  EXPECT_EQ(trainer.model().num_parameters(), models::parameter_count(config));
  const auto& history = trainer.train();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_TRUE(std::isfinite(history.back().loss));
}

}  // namespace hf_interop_test
}  // namespace titan
