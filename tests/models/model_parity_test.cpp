// The llama3 and qwen3 debug models against the float64 PyTorch reference
// (tests/reference/model.py) fed the same weights: logits, loss and every
// parameter's gradient, in f32, with flash and naive attention and with the
// fused and plain losses.
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
};
void PrintTo(const ParityCase& c, std::ostream* out) {
  *out << c.model << "/" << c.attention << (c.fused_loss ? "/fused" : "/plain");
}

class ModelParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(ModelParityTest, LogitsLossAndGradients) {
  const ParityCase& c = GetParam();
  ReferenceCase ref("model_" + c.model + "_debug");
  models::DecoderConfig config = models::model_config(c.model, "debugmodel", ref.meta_int("vocab"));
  config.block.attention.attention_impl = c.attention;
  config.loss.fused = c.fused_loss;
  auto model = config.build();
  std::map<std::string, Tensor> state;
  for (auto& [name, parameter] : model->named_parameters()) state[name] = ref.get("param." + name);
  model->load_state_dict(state);

  const models::DecoderInputs inputs{ref.get("input_ids"), {}, {}};
  const Tensor logits = model->logits(inputs);
  // Six blocks deep, the logits carry ~30 f32 roundings per element path; 2e-5 of their scale still
  // separates a right model from one with any wrong term by orders of magnitude.
  const Tensor expected_logits = ref.get("logits");
  const auto tol = testing::tolerance_for(DType::f32, expected_logits);
  EXPECT_TRUE(testing::all_close(logits.view(expected_logits.shape()), expected_logits, tol.atol, tol.rtol));

  const Tensor loss = model->loss(inputs, ref.get("labels"));
  EXPECT_NEAR(loss.item(), ref.get("loss").item(), 1e-5 * ref.get("loss").item());
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
                                           ParityCase{"qwen3", "flash", true}, ParityCase{"qwen3", "naive", false}),
                         [](const auto& info) {
                           return info.param.model + "_" + info.param.attention +
                                  (info.param.fused_loss ? "_fused" : "_plain");
                         });

}  // namespace
}  // namespace titan
