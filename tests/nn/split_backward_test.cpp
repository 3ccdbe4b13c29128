// The split backward zero-bubble pipeline schedules run (autograd::backward_input
// now, WeightBackward::run later) against the fused backward, for every block
// type a stage can hold: dense and Qwen-style (q/k norm) blocks, MoE blocks
// with grouped and loop experts and a shared expert, the output head with its
// loss, in f32 and under bf16 mixed precision. Both halves run each node's own
// backward on the same gradients, so input and weight gradients must be
// bitwise equal; and the input half must leave the weight gradients to the
// weight half (else nothing was deferred).
#include <gtest/gtest.h>

#include "titan/autograd/engine.h"
#include "titan/autograd/function_node.h"
#include "titan/core/generator.h"
#include "titan/models/decoder.h"
#include "titan/models/model_spec.h"
#include "titan/nn/functional.h"
#include "titan/nn/initialize.h"
#include "titan/ops/random.h"

namespace titan {
namespace split_backward_test {

struct SplitCase {
  std::string name;
  std::string model;  // the registry family whose first block is tested
  std::optional<nn::ExpertImpl> experts;
  int64_t shared_experts = 0;
  DType dtype = DType::f32;
};

void PrintTo(const SplitCase& c, std::ostream* out) { *out << c.name << "/" << dtype_name(c.dtype); }

class SplitBackwardTest : public ::testing::TestWithParam<SplitCase> {};

Tensor normal(const Shape& shape, Generator& generator) {
  Tensor t = Tensor::empty(shape);
  ops::normal_(t, 0.0, 1.0, generator);
  return t;
}

std::map<std::string, Tensor> gradients(nn::Module& module) {
  std::map<std::string, Tensor> grads;
  for (auto& [name, parameter] : module.named_parameters()) {
    if (parameter->data.grad().defined()) grads[name] = parameter->data.grad().clone();
  }
  return grads;
}

void expect_bitwise_equal(const Tensor& expected, const Tensor& actual, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what;
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  const std::vector<float> e = expected.to_floats(), a = actual.to_floats();
  for (size_t i = 0; i < e.size(); ++i) ASSERT_EQ(e[i], a[i]) << what << " element " << i;
}

TEST_P(SplitBackwardTest, InputThenWeightHalvesEqualTheFusedBackward) {
  const SplitCase& c = GetParam();
  models::DecoderConfig config = models::model_config(c.model, "debugmodel", 256);
  nn::TransformerBlockConfig block_config = config.layers.front();
  if (c.experts) {
    for (const nn::TransformerBlockConfig& layer : config.layers) {
      if (layer.moe) block_config = layer;
    }
    ASSERT_TRUE(block_config.moe.has_value());
    block_config.moe->expert_impl = *c.experts;
    block_config.moe->num_shared_experts = c.shared_experts;
  }
  auto block = block_config.build();
  Generator generator(7);
  block->set_init(0.02);
  nn::initialize(*block, generator.seed());
  if (c.dtype == DType::bf16) {
    for (auto& [name, parameter] : block->named_parameters()) {
      parameter->parametrizations.push_back([](const Tensor& t) { return F::cast(t, DType::bf16); });
    }
  }
  const int64_t batch = 2, seq = 16, dim = block_config.attention.dim;
  const ops::RopeTable table = ops::rope_table(block_config.attention.head_size(), seq, 10000.0, {});
  nn::BlockInputs inputs{{&table, {}, {}}, nullptr};
  inputs.attention.mask.causal = true;
  const Tensor x_data = normal({batch, seq, dim}, generator).to(c.dtype);
  const Tensor upstream = normal({batch, seq, dim}, generator).to(c.dtype);

  // Fused.
  Tensor x = x_data.clone();
  x.set_requires_grad(true);
  autograd::backward({block->forward(x, inputs)}, {upstream});
  const Tensor fused_input_grad = x.grad().clone();
  const std::map<std::string, Tensor> fused = gradients(*block);
  ASSERT_FALSE(fused.empty());
  block->zero_grad();

  // Split.
  Tensor x2 = x_data.clone();
  x2.set_requires_grad(true);
  autograd::WeightBackward weights = autograd::backward_input({block->forward(x2, inputs)}, {upstream}, {x2});
  expect_bitwise_equal(fused_input_grad, x2.grad(), "input gradient");
  // The projections' weight gradients are the deferred work.
  for (auto& [name, parameter] : block->named_parameters()) {
    if (name == "attention.wq.weight" || name == "attention.wo.weight" || name == "attention_norm.weight") {
      EXPECT_FALSE(parameter->data.grad().defined()) << name << " computed by the input half";
    }
  }
  ASSERT_FALSE(weights.empty());
  weights.run();
  const std::map<std::string, Tensor> split = gradients(*block);
  ASSERT_EQ(split.size(), fused.size());
  for (const auto& [name, grad] : fused) expect_bitwise_equal(grad, split.at(name), name);
}

INSTANTIATE_TEST_SUITE_P(Blocks, SplitBackwardTest,
                         ::testing::Values(SplitCase{"llama3_dense", "llama3", std::nullopt},
                                           SplitCase{"qwen3_qk_norm", "qwen3", std::nullopt},
                                           SplitCase{"moe_grouped", "qwen3_moe", nn::ExpertImpl::grouped},
                                           SplitCase{"moe_loop_shared", "qwen3_moe", nn::ExpertImpl::loop, 1},
                                           SplitCase{"llama3_dense", "llama3", std::nullopt, 0, DType::bf16},
                                           SplitCase{"moe_grouped", "qwen3_moe", nn::ExpertImpl::grouped, 0,
                                                     DType::bf16}),
                         [](const auto& info) { return info.param.name + "_" + dtype_name(info.param.dtype); });

// The last stage's head: final norm, output projection and the loss. Its
// input gradient comes first; norm and output weights wait for the weight half.
TEST(SplitBackward, OutputHeadAndLoss) {
  models::DecoderConfig config = models::model_config("llama3", "debugmodel", 256);
  config.set_layers(1, config.layers.front());
  auto model = config.build();
  Generator generator(3);
  model->init_weights(generator);
  const Tensor hidden_data = normal({2, 16, config.dim()}, generator);
  std::vector<int64_t> label_values(32);
  for (size_t i = 0; i < label_values.size(); ++i) label_values[i] = static_cast<int64_t>((i * 37) % 256);
  const Tensor labels = Tensor::from_vector(label_values, {2, 16});
  const auto head_loss = [&](const Tensor& hidden) {
    return model->loss_function(model->norm->forward(hidden), model->output_weight(), labels);
  };
  Tensor h = hidden_data.clone();
  h.set_requires_grad(true);
  autograd::backward({head_loss(h)});
  const Tensor fused_input = h.grad().clone();
  const std::map<std::string, Tensor> fused = gradients(*model);
  model->zero_grad();

  Tensor h2 = hidden_data.clone();
  h2.set_requires_grad(true);
  autograd::WeightBackward weights = autograd::backward_input({head_loss(h2)}, {}, {h2});
  expect_bitwise_equal(fused_input, h2.grad(), "hidden gradient");
  EXPECT_FALSE(model->output->weight->data.grad().defined());
  weights.run();
  for (const auto& [name, grad] : fused) expect_bitwise_equal(grad, gradients(*model).at(name), name);
}

// Each half asks a node only for its own gradients (input_grad_wanted), so a
// linear's two GEMMs run once each over the two halves, not twice.
TEST(SplitBackward, EachHalfWantsOnlyItsOwnGradients) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2}, {2});
  x.set_requires_grad(true);
  Tensor w = Tensor::from_vector(std::vector<float>{3, 4}, {2});
  w.set_requires_grad(true);
  Tensor y = F::mul(x, w).detach();
  std::vector<std::pair<bool, bool>> asked;
  autograd::record("Probe", {&x, &w}, {&y}, [&](const std::vector<Tensor>& g) {
    asked.emplace_back(autograd::input_grad_wanted(0), autograd::input_grad_wanted(1));
    return std::vector<Tensor>{g[0], g[0]};
  });
  autograd::WeightBackward weights = autograd::backward_input({F::sum(y)}, {}, {x});
  weights.run();
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0], std::make_pair(true, false));  // the input half
  EXPECT_EQ(asked[1], std::make_pair(false, true));  // the weight half
  EXPECT_EQ(x.grad().to_floats(), (std::vector<float>{1, 1}));
  EXPECT_EQ(w.grad().to_floats(), (std::vector<float>{1, 1}));
  // A plain backward wants both.
  asked.clear();
  Tensor y2 = F::mul(x, w).detach();
  autograd::record("Probe", {&x, &w}, {&y2}, [&](const std::vector<Tensor>& g) {
    asked.emplace_back(autograd::input_grad_wanted(0), autograd::input_grad_wanted(1));
    return std::vector<Tensor>{g[0], g[0]};
  });
  autograd::backward({F::sum(y2)});
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], std::make_pair(true, true));
}

// A root with no path to any input (the first stage: token ids need no
// gradient) is deferred whole; running the weight half twice is an error.
TEST(SplitBackward, RootWithoutInputPathIsAllWeightWork) {
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  w.set_requires_grad(true);
  Tensor leaf = Tensor::from_vector(std::vector<float>{4, 5, 6}, {3});
  leaf.set_requires_grad(true);
  const Tensor loss = F::sum(F::mul(w, w));
  autograd::WeightBackward weights = autograd::backward_input({loss}, {}, {leaf});
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(leaf.grad().defined());
  weights.run();
  EXPECT_EQ(w.grad().to_floats(), (std::vector<float>{2, 4, 6}));
  EXPECT_THROW(weights.run(), Error);
}

}  // namespace split_backward_test
}  // namespace titan
