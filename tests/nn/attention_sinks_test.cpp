// nn::Attention with gpt-oss's attention sinks (AttentionConfig::sinks): the
// "sinks" parameter [n_heads]; the flash layer against the naive one (the sink
// as one more softmax column) in output and every gradient, the sinks' own
// included; the KV-cached decode against the full forward under a sliding
// window; and sinks that move the output (at -100 they vanish: the layer
// without sinks). Tolerance: testing::tolerance_for(f32) (2e-5 of the scale),
// as for the ops they run.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/core/copy.h"
#include "titan/nn/attention.h"
#include "titan/nn/functional.h"

namespace titan::nn {
namespace attention_sinks_test {

AttentionConfig sinks_config(const std::string& impl) {
  AttentionConfig config;
  config.dim = 32;
  config.n_heads = 4;
  config.n_kv_heads = 2;
  config.head_dim = 8;
  config.rope = false;  // positions do not matter to what is checked here
  config.sliding_window = 5;
  config.sinks = true;
  config.attention_impl = impl;
  return config;
}

void fill(Module& module) {
  uint64_t seed = 10;
  for (auto& [name, parameter] : module.named_parameters()) {
    titan::copy_(parameter->data, titan::testing::random_leaf(parameter->data.shape(), seed++, 0.5).detach());
  }
}

void expect_close(const Tensor& actual, const Tensor& expected, const char* what) {
  SCOPED_TRACE(what);
  const auto tol = titan::testing::tolerance_for(DType::f32, expected);
  EXPECT_TRUE(titan::testing::all_close(actual, expected, tol.atol, tol.rtol));
}

TEST(AttentionSinks, FlashLayerMatchesNaiveLayer) {
  const auto flash = sinks_config("flash").build();
  const auto naive = sinks_config("naive").build();
  fill(*flash);
  naive->load_state_dict(flash->state_dict());
  ASSERT_NE(flash->sinks, nullptr);
  EXPECT_EQ(flash->state_dict().at("sinks").shape(), (Shape{4}));

  const Tensor x = titan::testing::random_leaf({2, 11, 32}, 1).detach();
  const Tensor upstream = titan::testing::random_leaf({2, 11, 32}, 2).detach();
  AttentionInputs inputs;
  const Tensor y_flash = flash->forward(x, inputs), y_naive = naive->forward(x, inputs);
  expect_close(y_flash, y_naive, "y");
  autograd::backward({F::sum(F::mul(y_flash, upstream))});
  autograd::backward({F::sum(F::mul(y_naive, upstream))});
  std::map<std::string, Parameter*> naive_parameters;
  for (auto& [name, parameter] : naive->named_parameters()) naive_parameters[name] = parameter;
  for (auto& [name, parameter] : flash->named_parameters()) {
    ASSERT_TRUE(parameter->data.grad().defined()) << name;
    expect_close(parameter->data.grad(), naive_parameters.at(name)->data.grad(), name.c_str());
  }
}

TEST(AttentionSinks, CachedDecodeMatchesFullForward) {
  const auto attention = sinks_config("flash").build();
  fill(*attention);
  const Tensor x = titan::testing::random_leaf({2, 11, 32}, 3).detach();
  AttentionInputs inputs;
  const Tensor full = attention->forward(x, inputs);
  const Tensor key_cache = Tensor::zeros({2, 16, 2, 8}), value_cache = Tensor::zeros({2, 16, 2, 8});
  Tensor cached = attention->forward_cached(x.narrow(1, 0, 4).contiguous(), inputs, key_cache, value_cache, 0);
  for (int64_t t = 4; t < 11; ++t) {
    cached = F::concat(cached,
                       attention->forward_cached(x.narrow(1, t, 1).contiguous(), inputs, key_cache, value_cache, t), 1);
  }
  expect_close(cached, full, "cached");
}

TEST(AttentionSinks, SinksMoveTheOutputAndVanishAtMinusInfinity) {
  const auto attention = sinks_config("flash").build();
  fill(*attention);
  AttentionConfig plain_config = sinks_config("flash");
  plain_config.sinks = false;
  const auto plain = plain_config.build();
  std::map<std::string, Tensor> state = attention->state_dict();
  state.erase("sinks");
  plain->load_state_dict(state);

  const Tensor x = titan::testing::random_leaf({1, 9, 32}, 4).detach();
  AttentionInputs inputs;
  const Tensor with_sinks = attention->forward(x, inputs).detach(), without = plain->forward(x, inputs).detach();
  const auto tol = titan::testing::tolerance_for(DType::f32, without);
  EXPECT_FALSE(titan::testing::all_close(with_sinks, without, tol.atol, tol.rtol));
  titan::fill_(attention->sinks->data, -100.0);  // e^-100: nothing next to the scores' e^O(1)
  expect_close(attention->forward(x, inputs).detach(), without, "sinks at -100");
}

}  // namespace attention_sinks_test
}  // namespace titan::nn
