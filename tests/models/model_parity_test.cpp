// The llama3, qwen3 and qwen3_moe debug models against the float64 PyTorch
// reference (tests/reference/model.py, for MoE Hugging Face's Qwen3-MoE
// maths) fed the same weights: logits, loss, the MoE auxiliary loss and every
// parameter's gradient (of the loss plus the auxiliary term), in f32, with
// flash and naive attention, the fused and plain losses, and for MoE the
// grouped and looped experts.
#include <gtest/gtest.h>

#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/models/model_spec.h"
#include "titan/nn/functional.h"

namespace titan {
namespace {

using testing::ReferenceCase;

struct ParityCase {
  std::string model;
  std::string attention;
  bool fused_loss;
  std::string experts = "grouped";
};
void PrintTo(const ParityCase& c, std::ostream* out) {
  *out << c.model << "/" << c.attention << (c.fused_loss ? "/fused" : "/plain") << "/" << c.experts;
}

class ModelParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(ModelParityTest, LogitsLossAndGradients) {
  const ParityCase& c = GetParam();
  ReferenceCase ref("model_" + c.model + "_debug");
  models::DecoderConfig config = models::model_config(c.model, "debugmodel", ref.meta_int("vocab"));
  config.edit_layers([&](nn::TransformerBlockConfig& layer) {
    layer.attention.attention_impl = c.attention;
    if (layer.moe) layer.moe->expert_impl = nn::parse_expert_impl(c.experts);
  });
  config.loss.fused = c.fused_loss;
  auto model = config.build();
  std::map<std::string, Tensor> state;
  for (auto& [name, parameter] : model->named_parameters()) state[name] = ref.get("param." + name);
  for (auto& [name, buffer] : model->state_dict()) {
    if (!state.count(name)) state[name] = buffer;  // the MoE expert bias, zero in both
  }
  model->load_state_dict(state);

  const models::DecoderInputs inputs{ref.get("input_ids"), {}, {}};
  const Tensor logits = model->logits(inputs);
  // Six blocks deep, the logits carry ~30 f32 roundings per element path; 2e-5 of their scale still
  // separates a right model from one with any wrong term by orders of magnitude.
  const Tensor expected_logits = ref.get("logits");
  const auto tol = testing::tolerance_for(DType::f32, expected_logits);
  EXPECT_TRUE(testing::all_close(logits.view(expected_logits.shape()), expected_logits, tol.atol, tol.rtol));

  models::LossParts parts;
  const Tensor loss = model->loss(inputs, ref.get("labels"), &parts);
  EXPECT_NEAR(loss.item(), ref.get("loss").item(), 1e-5 * ref.get("loss").item());
  if (ref.has("aux_loss")) {
    ASSERT_TRUE(parts.aux.defined());
    // Fractions of 128 tokens and f32 means of softmax scores: the product is exact to ~1e-6.
    EXPECT_NEAR(parts.aux.item(), ref.get("aux_loss").item(), 1e-5 * ref.get("aux_loss").item());
  } else {
    EXPECT_FALSE(parts.aux.defined());
  }
  autograd::backward({loss});
  for (auto& [name, parameter] : model->named_parameters()) {
    SCOPED_TRACE(name);
    const Tensor expected = ref.get("grad." + name);
    const auto grad_tol = testing::tolerance_for(DType::f32, expected);
    // Gradients pass through every layer's backward: allow 5x the op-level tolerance.
    EXPECT_TRUE(testing::all_close(parameter->data.grad(), expected, 5 * grad_tol.atol, 5 * grad_tol.rtol));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelParityTest,
                         ::testing::Values(ParityCase{"llama3", "flash", true}, ParityCase{"llama3", "naive", false},
                                           ParityCase{"qwen3", "flash", true}, ParityCase{"qwen3", "naive", false},
                                           ParityCase{"qwen3_moe", "flash", true},
                                           ParityCase{"qwen3_moe", "naive", false, "loop"}),
                         [](const auto& info) {
                           return info.param.model + "_" + info.param.attention +
                                  (info.param.fused_loss ? "_fused" : "_plain") +
                                  (info.param.model == "qwen3_moe" ? "_" + info.param.experts : "");
                         });

}  // namespace
}  // namespace titan
