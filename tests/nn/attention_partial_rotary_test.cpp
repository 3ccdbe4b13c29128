// nn::Attention with a partial rotary width (AttentionConfig::rotary_dim, the
// first 4 of 8 features of each head rotate) and a YaRN table (its attention
// factor in cos and sin), in both pairings: the KV-cached decode (keys rotated
// once, at their positions) against the full forward; the width mattering
// (whole-head rotation moves the output); a table of the wrong width refused.
// Tolerance: testing::tolerance_for(f32) (2e-5 of the scale), as for the ops they run.
#include <gtest/gtest.h>

#include <vector>

#include "support/gradcheck.h"
#include "support/reference.h"
#include "titan/core/copy.h"
#include "titan/nn/attention.h"
#include "titan/nn/functional.h"

namespace titan::nn {
namespace attention_partial_rotary_test {

AttentionConfig partial_config(ops::RopeStyle style, int64_t rotary_dim) {
  AttentionConfig config;
  config.dim = 32;
  config.n_heads = 4;
  config.n_kv_heads = 2;
  config.head_dim = 8;
  config.rotary_dim = rotary_dim;
  config.rope_style = style;
  return config;
}

void fill(Module& module) {
  uint64_t seed = 20;
  for (auto& [name, parameter] : module.named_parameters()) {
    titan::copy_(parameter->data, titan::testing::random_leaf(parameter->data.shape(), seed++, 0.5).detach());
  }
}

const ops::RopeScaling kYarn{.type = ops::RopeScalingType::yarn, .factor = 4.0, .original_max_position = 8};

TEST(AttentionPartialRotary, CachedDecodeMatchesFullForward) {
  const ops::RopeTable table = ops::rope_table(4, 16, 10000.0, kYarn);
  for (ops::RopeStyle style : {ops::RopeStyle::interleaved, ops::RopeStyle::half}) {
    SCOPED_TRACE(style == ops::RopeStyle::half ? "half" : "interleaved");
    const auto attention = partial_config(style, 4).build();
    fill(*attention);
    const Tensor x = titan::testing::random_leaf({2, 11, 32}, 3).detach();
    AttentionInputs inputs;
    inputs.rope = &table;
    inputs.mask.causal = true;
    const Tensor full = attention->forward(x, inputs);
    const Tensor key_cache = Tensor::zeros({2, 16, 2, 8}), value_cache = Tensor::zeros({2, 16, 2, 8});
    const auto step = [&](int64_t start, int64_t length) {
      std::vector<int64_t> positions;
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t i = 0; i < length; ++i) positions.push_back(start + i);
      }
      AttentionInputs at = inputs;
      at.positions = Tensor::from_vector(positions, {2, length});
      return attention->forward_cached(x.narrow(1, start, length).contiguous(), at, key_cache, value_cache, start);
    };
    Tensor cached = step(0, 4);
    for (int64_t t = 4; t < 11; ++t) cached = F::concat(cached, step(t, 1), 1);
    const auto tol = titan::testing::tolerance_for(DType::f32, full);
    EXPECT_TRUE(titan::testing::all_close(cached, full, tol.atol, tol.rtol));

    // The same weights rotating whole heads give another output.
    const auto whole = partial_config(style, 0).build();
    whole->load_state_dict(attention->state_dict());
    const ops::RopeTable whole_table = ops::rope_table(8, 16, 10000.0, kYarn);
    AttentionInputs whole_inputs = inputs;
    whole_inputs.rope = &whole_table;
    EXPECT_GT(titan::testing::relative_l2_error(whole->forward(x, whole_inputs), full), 1e-2);
    // And a table for the whole head is refused by the partial layer.
    EXPECT_THROW(attention->forward(x, whole_inputs), Error);
  }
}

TEST(AttentionPartialRotary, BadWidthIsRefused) {
  EXPECT_THROW(partial_config(ops::RopeStyle::half, 5).build(), Error);
  EXPECT_THROW(partial_config(ops::RopeStyle::half, 10).build(), Error);
}

}  // namespace attention_partial_rotary_test
}  // namespace titan::nn
