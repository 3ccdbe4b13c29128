// A whole decoder block against the float64 PyTorch reference in
// tests/reference/model.py fed the same weights: output, input gradient and
// every parameter gradient, in f32 and in bf16 mixed precision (bf16 compute
// through a cast parametrization, gradients landing in f32). Llama- and
// Qwen 3-style blocks, and the Hugging Face family variants: Gemma 2 (pre- and
// post-norms scaling by 1 + w, GeGLU, custom score scale, a binding logit soft
// cap, sliding window), Gemma 3 (per-head q/k norms scaling by 1 + w), OLMo 2
// (post-norms only, whole-projection q/k norms) and Qwen 2 (q/k/v biases).
#include <gtest/gtest.h>

#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/nn/functional.h"
#include "titan/nn/transformer_block.h"

namespace titan {
namespace block_test {

using testing::ReferenceCase;

struct BlockCase {
  std::string name;
  std::string impl;
  DType dtype;
};

void PrintTo(const BlockCase& c, std::ostream* out) { *out << c.name << "/" << c.impl << "/" << dtype_name(c.dtype); }

class BlockTest : public ::testing::TestWithParam<BlockCase> {};

TEST_P(BlockTest, MatchesReference) {
  const BlockCase& c = GetParam();
  ReferenceCase ref("block_" + c.name);
  // The family variants' keys; the Llama/Qwen 3 cases predate them and leave them at their defaults.
  auto meta_or = [&](const std::string& key, double fallback) {
    return ref.has_meta(key) ? ref.meta_double(key) : fallback;
  };
  nn::TransformerBlockConfig config;
  config.attention = {
      .dim = ref.meta_int("dim"),
      .n_heads = ref.meta_int("n_heads"),
      .n_kv_heads = ref.meta_int("n_kv_heads"),
      .head_dim = ref.meta_int("head_dim"),
      .qk_norm = ref.meta_int("qk_norm") != 0,
      .qk_norm_whole_projection = meta_or("qk_norm_whole_projection", 0) != 0,
      .qk_norm_weight_offset = meta_or("qk_norm_weight_offset", 0.0),
      .norm_eps = ref.meta_double("norm_eps"),
      .qkv_bias = meta_or("qkv_bias", 0) != 0,
      .rope_style = ref.meta("rope_style") == "half" ? ops::RopeStyle::half : ops::RopeStyle::interleaved,
      .attention_impl = c.impl,
      .sliding_window = static_cast<int64_t>(meta_or("sliding_window", 0)),
      .scale_dim = meta_or("scale_dim", 0.0),
      .logit_softcap = static_cast<float>(meta_or("logit_softcap", 0.0))};
  const std::string activation = ref.has_meta("activation") ? ref.meta("activation") : "silu";
  ASSERT_TRUE(activation == "silu" || activation == "gelu_tanh") << activation;
  config.feed_forward = {
      .dim = config.attention.dim,
      .hidden_dim = ref.meta_int("hidden_dim"),
      .activation = activation == "gelu_tanh" ? nn::FeedForwardActivation::gelu_tanh : nn::FeedForwardActivation::silu};
  config.norm_eps = ref.meta_double("norm_eps");
  config.norm_weight_offset = meta_or("norm_weight_offset", 0.0);
  config.pre_norms = meta_or("pre_norms", 1) != 0;
  config.post_norms = meta_or("post_norms", 0) != 0;
  auto block = config.build();
  std::map<std::string, Tensor> state;
  for (auto& [name, parameter] : block->named_parameters()) {
    ASSERT_TRUE(ref.has("param." + name)) << name << " is not in the reference block";
    state[name] = ref.get("param." + name);
  }
  // Nor does the reference hold a parameter titan lacks (a missing bias or norm would otherwise go unnoticed).
  for (const std::string& name : ref.tensor_names()) {
    if (name.starts_with("param.")) {
      EXPECT_TRUE(state.contains(name.substr(6))) << name << " is not in titan's block";
    }
  }
  block->load_state_dict(state);
  if (c.dtype == DType::bf16) {
    for (auto& [name, parameter] : block->named_parameters()) {
      parameter->parametrizations.push_back([](const Tensor& t) { return F::cast(t, DType::bf16); });
    }
  }

  const Tensor positions = ref.get("positions");
  const ops::RopeTable table =
      ops::rope_table(config.attention.head_size(), positions.size(1) + 1, ref.meta_double("rope_theta"), {});
  nn::AttentionInputs inputs{&table, positions, {}};
  if (ref.has("document_ids")) inputs.mask.document_ids = ref.get("document_ids");

  Tensor x = ref.get("x", c.dtype);
  x.set_requires_grad(true);
  const Tensor y = block->forward(x, nn::BlockInputs{inputs, nullptr});
  autograd::backward({y}, {ref.get("grad_y", c.dtype)});

  // f32: elementwise within tolerance_for (see tests/support/reference.h).
  // bf16: every activation is rounded to 8 bits and the block chains ~15
  // rounded ops, so compare whole tensors: relative L2 error under 3%.
  auto check = [&](const std::string& what, const Tensor& actual, const Tensor& expected) {
    SCOPED_TRACE(what);
    ASSERT_TRUE(actual.defined());
    if (c.dtype == DType::f32) {
      const auto tol = testing::tolerance_for(DType::f32, expected);
      EXPECT_TRUE(testing::all_close(actual, expected, tol.atol, tol.rtol));
    } else {
      EXPECT_LT(testing::relative_l2_error(actual, expected), 3e-2);
    }
  };
  check("y", y, ref.get("y"));
  check("grad_x", x.grad(), ref.get("grad_x"));
  for (auto& [name, parameter] : block->named_parameters()) {
    EXPECT_EQ(parameter->data.grad().dtype(), DType::f32) << name;  // master gradients stay f32
    check("grad." + name, parameter->data.grad(), ref.get("grad." + name));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BlockTest,
    ::testing::Values(BlockCase{"llama", "naive", DType::f32}, BlockCase{"qwen", "naive", DType::f32},
                      BlockCase{"llama_documents", "naive", DType::f32}, BlockCase{"llama", "naive", DType::bf16},
                      BlockCase{"qwen", "naive", DType::bf16}, BlockCase{"gemma2", "naive", DType::f32},
                      BlockCase{"gemma2", "flash", DType::f32}, BlockCase{"gemma2", "naive", DType::bf16},
                      BlockCase{"gemma2", "flash", DType::bf16}, BlockCase{"gemma3", "naive", DType::f32},
                      BlockCase{"gemma3", "flash", DType::f32}, BlockCase{"gemma3", "naive", DType::bf16},
                      BlockCase{"olmo2", "naive", DType::f32}, BlockCase{"olmo2", "flash", DType::f32},
                      BlockCase{"olmo2", "naive", DType::bf16}, BlockCase{"qwen2", "naive", DType::f32},
                      BlockCase{"qwen2", "flash", DType::f32}, BlockCase{"qwen2", "naive", DType::bf16}),
    [](const auto& info) { return info.param.name + "_" + info.param.impl + "_" + dtype_name(info.param.dtype); });

}  // namespace block_test
}  // namespace titan
