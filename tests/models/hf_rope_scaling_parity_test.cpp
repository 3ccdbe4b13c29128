// Long-context RoPE of Hugging Face configs against tests/reference/hf_families.py
// (plain float64 PyTorch from transformers' maths, its RoPE from
// tests/reference/rope_scaling.py), on small random folders of
// make_hf_family_folder.py with the rope block of a published family:
//  - Gemma 3 with rope_scaling linear 8 (its 4B+ text configs): the global
//    layer scaled, the local ones on their own unscaled table;
//  - Phi-3 with longrope (Phi-3.5) and partial_rotary_factor 0.75 (Phi-4-mini),
//    original length 8 below every sequence here, so transformers and titan
//    both take the long factors;
//  - Qwen 2 with YaRN 4 (Qwen2.5's model cards);
//  - Mistral with transformers 5's rope_parameters: YaRN without truncation
//    and with DeepSeek's mscale / mscale_all_dim.
// For each: logits, loss and the q/k projections' gradients (the backward of
// the scaled, partial rotation) in f32; the scaling switched off moving the
// logits far off; and, for the Phi-3 and Qwen 2 cases, greedy generation
// through the KV cache.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "data/peer_support.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/generate.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/hf/hf_weights.h"

namespace titan {
namespace hf_rope_scaling_parity_test {

namespace fs = std::filesystem;
using data::testing::run_command;
using data::testing::shell_quote;
using data::testing::TempDir;

struct Case {
  std::string name, arch;
  std::vector<std::string> sets;  // make_hf_family_folder.py --set entries
  // Greedy generation too (the partial and the attention-factor tables through
  // the KV cache; two cases suffice, and each costs a reference run).
  bool generate = false;
};

const std::vector<Case> kCases = {
    {"gemma3_linear", "gemma3", {R"(rope_scaling={"rope_type": "linear", "factor": 8.0})"}},
    {"phi3_longrope_partial",
     "phi3",
     {"partial_rotary_factor=0.75", "original_max_position_embeddings=8",
      R"(rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5],
                       "long_factor": [1.0, 1.5, 3.0, 6.0, 12.0, 24.0]})"},
     true},
    {"qwen2_yarn",
     "qwen2",
     {R"(rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})"},
     true},
    {"mistral_yarn_rope_parameters",
     "mistral",
     {"rope_theta=null",
      R"(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                          "original_max_position_embeddings": 32, "beta_fast": 8.0, "beta_slow": 1.0,
                          "truncate": false, "mscale": 1.0, "mscale_all_dim": 0.5})"}},
};

constexpr int64_t kBatch = 2, kSeq = 24, kPromptLength = 12, kNewTokens = 8;

std::string run_reference(const std::string& script, const std::string& arguments) {
  const std::string command = std::string(TITAN_PYTHON) + " " +
                              shell_quote(std::string(TITAN_REFERENCE_SCRIPTS_DIR) + "/" + script) + " " + arguments;
  const auto result = run_command(command);
  if (result.exit_code != 0) throw std::runtime_error(command + " failed:\n" + result.output);
  return result.output;
}

std::string q(const fs::path& path) { return shell_quote(path.string()); }

std::vector<int64_t> random_ids(uint32_t seed, int64_t count, int64_t vocab) {
  std::mt19937 generator(seed);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < count; ++i) ids.push_back(static_cast<int64_t>(generator() % static_cast<uint32_t>(vocab)));
  return ids;
}

// titan's greedy tokens through the KV cache against hf_families.py generate on the same prompt.
void expect_same_generation(const TempDir& dir, const models::Decoder& model, int64_t vocab) {
  const std::vector<int64_t> prompt = random_ids(7, kPromptLength, vocab);
  checkpoint::write_safetensors((dir / "prompt.safetensors").string(),
                                {{"input_ids", Tensor::from_vector(prompt, {1, kPromptLength})}});
  run_reference("hf_families.py", "generate " + q(dir / "hf") + " " + q(dir / "prompt.safetensors") + " " +
                                      q(dir / "generated.safetensors") + fmt::format(" --new-tokens {}", kNewTokens));
  models::SamplingOptions options;
  options.max_new_tokens = kNewTokens;
  EXPECT_EQ(models::generate(model, prompt, options),
            checkpoint::SafetensorsReader((dir / "generated.safetensors").string()).read("tokens").to_ints());
}

class HfRopeScalingParity : public ::testing::TestWithParam<Case> {};

TEST_P(HfRopeScalingParity, LogitsGradientsAndGenerationMatch) {
  const Case& c = GetParam();
  TempDir dir;
  std::string sets;
  for (const std::string& set : c.sets) sets += " --set " + shell_quote(set);
  run_reference("make_hf_family_folder.py", c.arch + " " + q(dir / "hf") + " --seed 7" + sets);
  const models::HfFolderReader reader((dir / "hf").string());
  const models::DecoderConfig config = models::decoder_config_from_hf(reader.config());
  ASSERT_NE(config.rope_scaling.type, ops::RopeScalingType::none);
  const std::map<std::string, Tensor> weights = models::read_hf_weights(reader, config);
  const auto build = [&](const models::DecoderConfig& edited) {
    auto model = edited.build();
    std::map<std::string, Tensor> state = model->state_dict();
    for (const auto& [name, tensor] : weights) state[name] = tensor;
    model->load_state_dict(state);
    return model;
  };

  const int64_t vocab = config.vocab_size;
  const Tensor ids = Tensor::from_vector(random_ids(3, kBatch * kSeq, vocab), {kBatch, kSeq});
  const Tensor labels = Tensor::from_vector(random_ids(4, kBatch * kSeq, vocab), {kBatch, kSeq});
  checkpoint::write_safetensors((dir / "inputs.safetensors").string(), {{"input_ids", ids}, {"labels", labels}});
  run_reference("hf_families.py", "forward " + q(dir / "hf") + " " + q(dir / "inputs.safetensors") + " " +
                                      q(dir / "forward.safetensors"));
  const checkpoint::SafetensorsReader ref((dir / "forward.safetensors").string());
  const Tensor expected_logits = ref.read("logits");
  const double expected_loss = ref.read("loss").to_floats().front();

  const auto model = build(config);
  const models::DecoderInputs inputs{ids, {}, {}};
  // As hf_family_parity_test: a few dozen f32 roundings per logit against the float64 reference.
  const auto tol = testing::tolerance_for(DType::f32, expected_logits);
  {
    autograd::NoGradGuard no_grad;
    EXPECT_TRUE(testing::all_close(model->logits(inputs), expected_logits, tol.atol, tol.rtol));
  }
  const Tensor loss = model->loss(inputs, labels);
  EXPECT_NEAR(loss.item(), expected_loss, 1e-5 * expected_loss);
  autograd::backward({loss});
  // The q and k projections' gradients flow back through the rotation (Phi-3: rows of qkv_proj).
  const nn::AttentionConfig& a = config.layers.front().attention;
  const int64_t q_rows = a.n_heads * a.head_size(), k_rows = a.kv_heads() * a.head_size();
  for (int64_t layer = 0; layer < config.n_layers(); ++layer) {
    const std::string hf = fmt::format("grad.model.layers.{}.self_attn.", layer);
    const auto& attention = (*model->layers)[static_cast<size_t>(layer)]->attention;
    for (const bool query : {true, false}) {
      SCOPED_TRACE(fmt::format("layer {} {}", layer, query ? "wq" : "wk"));
      const Tensor expected =
          c.arch == "phi3"
              ? ref.read(hf + "qkv_proj.weight").narrow(0, query ? 0 : q_rows, query ? q_rows : k_rows).contiguous()
              : ref.read(hf + (query ? "q_proj.weight" : "k_proj.weight"));
      const Tensor got = (query ? attention->wq : attention->wk)->weight->data.grad();
      const auto grad_tol = testing::tolerance_for(DType::f32, expected);
      // Through every layer's backward: 5x the op-level tolerance, as hf_family_parity_test.
      EXPECT_TRUE(testing::all_close(got, expected, 5 * grad_tol.atol, 5 * grad_tol.rtol));
    }
  }

  // Greedy decoding through the KV cache (each new key rotated once, at its position) against the reference,
  // which recomputes the whole sequence each step.
  if (c.generate) expect_same_generation(dir, *model, vocab);

  // Without the scaling (and with whole-head rotation) the logits move far off: the test can fail.
  models::DecoderConfig plain = config;
  plain.rope_scaling = {};
  plain.edit_layers([](nn::TransformerBlockConfig& layer) { layer.attention.rotary_dim = 0; });
  autograd::NoGradGuard no_grad;
  EXPECT_GT(testing::relative_l2_error(build(plain)->logits(inputs), expected_logits), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Configs, HfRopeScalingParity, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

}  // namespace hf_rope_scaling_parity_test
}  // namespace titan
