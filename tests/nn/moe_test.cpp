// The MoE block's load balancing and its configuration errors. (Its maths
// against Hugging Face's Qwen3-MoE is tested through the whole model in
// tests/models/model_parity_test.cpp and tests/train/training_parity_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "titan/autograd/grad_mode.h"
#include "titan/core/copy.h"
#include "titan/nn/moe.h"
#include "titan/ops/random.h"

namespace titan {
namespace moe_test {

nn::MoEConfig small_moe(double load_balance_coeff) {
  return {.dim = 16, .hidden_dim = 8, .num_experts = 8, .top_k = 2, .load_balance_coeff = load_balance_coeff};
}

// The busiest expert's tokens over the mean tokens per expert (1: perfectly balanced).
double load_spread(const Tensor& tokens_per_expert) {
  const std::vector<float> load = tokens_per_expert.to_floats();
  double sum = 0.0, busiest = 0.0;
  for (float tokens : load) {
    sum += tokens;
    busiest = std::max(busiest, static_cast<double>(tokens));
  }
  return busiest / (sum / static_cast<double>(load.size()));
}

// A router skewed on purpose: inputs with a positive mean, and gate rows of
// experts 0 and 1 aligned with it, so that nearly every token prefers those
// two; the rest of the gate random enough that tokens differ in their second
// choices (a bias can only balance tokens whose scores differ).
// Each step routes fresh tokens, records the spread, and updates the bias
// from that step's load, as the trainer does after an optimizer step. Returns
// the spread of the first step and the mean spread of the last 20.
std::pair<double, double> route_skewed_tokens(double load_balance_coeff, int steps) {
  autograd::NoGradGuard no_grad;
  const std::shared_ptr<nn::MoE> moe = small_moe(load_balance_coeff).build();
  Generator generator(7);
  ops::normal_(moe->router->gate->weight->data, 0.0, 0.3, generator);
  std::vector<float> gate = moe->router->gate->weight->data.to_floats();
  for (size_t i = 0; i < 2 * 16; ++i) gate[i] += 0.12f;
  titan::copy_(moe->router->gate->weight->data, Tensor::from_floats(gate, {8, 16}));

  double first = 0.0, last = 0.0;
  for (int step = 0; step < steps; ++step) {
    const Tensor x = Tensor::zeros({256, 16});
    ops::normal_(x, 1.0, 1.0, generator);
    titan::fill_(*moe->tokens_per_expert, 0.0);
    moe->forward(x, nullptr);
    const double spread = load_spread(*moe->tokens_per_expert);
    if (step == 0) first = spread;
    if (step >= steps - 20) last += spread / 20.0;
    moe->update_expert_bias(*moe->tokens_per_expert);
  }
  return {first, last};
}

TEST(MoE, AuxLossFreeBiasBalancesASkewedRouter) {
  // Without the bias, experts 0 and 1 take nearly every token (spread 4 would be all of them).
  const auto [skewed_first, skewed_last] = route_skewed_tokens(/*load_balance_coeff=*/0.0, 600);
  EXPECT_GT(skewed_first, 3.5);
  EXPECT_GT(skewed_last, 3.5);
  // With it (a step of 1e-3, DeepSeek-V3's bias update speed) the spread
  // falls to about 1.5 in 600 steps.
  const auto [first, last] = route_skewed_tokens(/*load_balance_coeff=*/1e-3, 600);
  EXPECT_GT(first, 3.5);
  EXPECT_LT(last, 2.0) << "the per-expert bias should have spread the tokens over the experts";
}

TEST(MoE, BiasUpdateMovesTowardsTheMeanLoadAndStaysCentred) {
  const std::shared_ptr<nn::MoE> moe = small_moe(0.5).build();
  moe->update_expert_bias(Tensor::from_floats(std::vector<float>{9, 1, 1, 1, 4, 4, 4, 0}, {8}));  // mean 3
  const std::vector<float> bias = moe->expert_bias->to_floats();
  // Directions: -1 for the 4 experts above the mean, +1 for the 4 below; centred already.
  const std::vector<float> expected = {-0.5f, 0.5f, 0.5f, 0.5f, -0.5f, -0.5f, -0.5f, 0.5f};
  EXPECT_EQ(bias, expected);
  // Unequal counts above and below: the step is centred so the bias sums to 0.
  moe->update_expert_bias(Tensor::from_floats(std::vector<float>{10, 1, 1, 1, 1, 1, 1, 0}, {8}));
  double sum = 0.0;
  for (float b : moe->expert_bias->to_floats()) sum += b;
  EXPECT_NEAR(sum, 0.0, 1e-6);
}

TEST(MoE, BadConfigurationsAreClearErrors) {
  nn::MoEConfig config = small_moe(0.0);
  config.top_k = 9;
  try {
    config.build();
    FAIL() << "top_k above the number of experts was accepted";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("top_k 9"), std::string::npos) << error.what();
  }
  config.top_k = 0;
  EXPECT_THROW(config.build(), std::exception);
  config = small_moe(0.0);
  config.num_experts = 0;
  EXPECT_THROW(config.build(), std::exception);
}

// Group-limited routing (DeepSeek-V3's n_group / topk_group) on one token
// whose router logits are given (an identity gate): experts in groups
// {0,1} {2,3} {4,5} {6,7}, each group scored by its two best sigmoid scores
// (1.000, 1.442, 1.358, 0.538), the best two groups kept: the top 2 experts
// are 2 and 3, not the best-scored expert 0, whose group partner is weak.
// Weights come from the unbiased scores, normalised, times route_scale.
TEST(MoE, GroupLimitedRoutingPicksWithinTheBestGroups) {
  nn::MoEConfig config{.dim = 8, .hidden_dim = 4, .num_experts = 8, .top_k = 2};
  config.score = nn::RouterScore::sigmoid;
  config.route_scale = 2.5;
  const std::vector<float> logits{3.0f, -3.0f, 1.0f, 0.9f, 0.8f, 0.7f, -1.0f, -1.0f};
  const auto route = [&](int64_t groups, int64_t kept) {
    config.num_expert_groups = groups;
    config.num_limited_groups = kept;
    nn::Router router(config, Device::cpu());
    std::vector<float> identity(64, 0.0f);
    for (size_t i = 0; i < 8; ++i) identity[i * 9] = 1.0f;
    titan::copy_(router.gate->weight->data, Tensor::from_vector(identity, {8, 8}));
    autograd::NoGradGuard no_grad;
    return router.route(Tensor::from_vector(logits, {1, 8}), Tensor());
  };
  const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const nn::Router::Routing grouped = route(4, 2);
  std::vector<int64_t> chosen{grouped.indices.data<int64_t>()[0], grouped.indices.data<int64_t>()[1]};
  std::sort(chosen.begin(), chosen.end());
  EXPECT_EQ(chosen, (std::vector<int64_t>{2, 3}));
  const std::vector<float> weights = grouped.weights.to_floats();
  const double total = sigmoid(1.0) + sigmoid(0.9);
  EXPECT_NEAR(weights[0] + weights[1], 2.5, 1e-5);
  EXPECT_NEAR(std::max(weights[0], weights[1]), 2.5 * sigmoid(1.0) / total, 1e-5);
  // Without the group limit the best-scored expert 0 is chosen.
  const nn::Router::Routing free = route(0, 0);
  std::vector<int64_t> unlimited{free.indices.data<int64_t>()[0], free.indices.data<int64_t>()[1]};
  std::sort(unlimited.begin(), unlimited.end());
  EXPECT_EQ(unlimited, (std::vector<int64_t>{0, 2}));
  // Groups that cannot hold top_k experts, or do not divide the experts, are refused.
  config.num_expert_groups = 4;
  config.num_limited_groups = 0;
  EXPECT_THROW(config.build(), std::exception);
  config.num_expert_groups = 3;
  config.num_limited_groups = 1;
  EXPECT_THROW(config.build(), std::exception);
}

}  // namespace moe_test
}  // namespace titan
