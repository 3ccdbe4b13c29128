// Module naming, state dicts, dtype/device moves and meta construction.
#include <gtest/gtest.h>

#include "titan/core/allocator.h"
#include "titan/nn/initialize.h"
#include "titan/nn/transformer_block.h"

namespace titan {
namespace module_test {

nn::TransformerBlockConfig small_block(bool qk_norm = false) {
  nn::TransformerBlockConfig config;
  config.attention = {.dim = 32, .n_heads = 4, .n_kv_heads = 2, .qk_norm = qk_norm};
  config.feed_forward = {.dim = 32, .hidden_dim = 48};
  return config;
}

TEST(Module, FullyQualifiedNames) {
  auto block = small_block(true).build();
  std::vector<std::string> names;
  for (auto& [name, parameter] : block->named_parameters()) names.push_back(name);
  const std::vector<std::string> expected{
      "attention.wq.weight",     "attention.wk.weight",     "attention.wv.weight",    "attention.wo.weight",
      "attention.q_norm.weight", "attention.k_norm.weight", "feed_forward.w1.weight", "feed_forward.w2.weight",
      "feed_forward.w3.weight",  "attention_norm.weight",   "ffn_norm.weight"};
  EXPECT_EQ(names, expected);
  // wq 32x32, wk/wv 32x16 each (2 kv heads of 8), wo 32x32, norms 8+8+32+32, ffn 3 * 32*48.
  EXPECT_EQ(block->num_parameters(), 32 * 32 * 2 + 2 * 32 * 16 + 8 + 8 + 3 * 32 * 48 + 32 + 32);
  for (auto& [name, parameter] : block->named_parameters()) EXPECT_TRUE(parameter->data.requires_grad()) << name;
}

TEST(Module, StateDictRoundTripAndErrors) {
  auto a = small_block().build(), b = small_block().build();
  Generator generator(3);
  a->set_init(0.01);
  nn::initialize(*a, generator.seed());
  b->load_state_dict(a->state_dict());
  for (auto& [name, tensor] : a->state_dict()) EXPECT_EQ(tensor.to_floats(), b->state_dict()[name].to_floats()) << name;

  auto state = a->state_dict();
  state.erase("ffn_norm.weight");
  EXPECT_THROW(b->load_state_dict(state), Error);
  b->load_state_dict(state, /*strict=*/false);
  state = a->state_dict();
  state["extra.weight"] = Tensor::zeros({1});
  EXPECT_THROW(b->load_state_dict(state), Error);
  state = a->state_dict();
  state["attention.wq.weight"] = Tensor::zeros({3, 3});
  try {
    b->load_state_dict(state);
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("attention.wq.weight"), std::string::npos) << error.what();
  }
}

TEST(Module, ToDtypeKeepsLeaves) {
  auto block = small_block().build();
  Generator generator(4);
  block->set_init(0.01);
  nn::initialize(*block, generator.seed());
  const std::vector<float> before = block->attention->wq->weight->data.to_floats();
  block->to(DType::bf16);
  EXPECT_EQ(block->attention->wq->weight->data.dtype(), DType::bf16);
  EXPECT_TRUE(block->attention->wq->weight->data.requires_grad());
  block->to(DType::f32);
  const std::vector<float> after = block->attention->wq->weight->data.to_floats();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(after[i], before[i], std::abs(before[i]) / 128);
}

TEST(Module, MetaBuildAllocatesNothing) {
  const int64_t live = memory_stats(DeviceType::cpu).live_bytes;
  nn::TransformerBlockConfig config;
  config.attention = {.dim = 4096, .n_heads = 32, .n_kv_heads = 8};
  config.feed_forward = {.dim = 4096, .hidden_dim = 14336};
  auto block = config.build(Device::meta());
  // One Llama 3 8B layer: 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336 + 2 * 4096.
  EXPECT_EQ(block->num_parameters(), 218112000);
  EXPECT_EQ(memory_stats(DeviceType::cpu).live_bytes, live);
  auto small = small_block().build(Device::meta());
  small->to_empty(Device::cpu());
  EXPECT_TRUE(small->attention->wq->weight->data.device().is_cpu());
  EXPECT_TRUE(small->attention->wq->weight->data.requires_grad());
}

TEST(Module, RejectsBadConfigs) {
  nn::AttentionConfig bad{.dim = 30, .n_heads = 4};
  EXPECT_THROW(bad.build(), Error);
  nn::AttentionConfig bad_groups{.dim = 32, .n_heads = 4, .n_kv_heads = 3};
  EXPECT_THROW(bad_groups.build(), Error);
  nn::AttentionConfig bad_impl{.dim = 32, .n_heads = 4, .attention_impl = "fast"};
  EXPECT_THROW(bad_impl.build(), Error);
}

}  // namespace module_test
}  // namespace titan
