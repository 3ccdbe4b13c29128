// FLUX's CLIP text encoder (models/flux/clip_text_encoder.h) against the
// float64 plain-PyTorch encoder of tests/reference/clip_text.py fed the same
// weights: the hidden states and the pooled output of two prompts closed and
// padded by the end-of-text id, in f32 and bf16; causality (a later token
// changes nothing before it); bad ids refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "support/model_checks.h"
#include "support/reference.h"
#include "titan/models/flux/clip_text_encoder.h"

namespace titan {
namespace clip_text_encoder_test {

using models::flux::ClipTextConfig;
using models::flux::ClipTextEncoder;

// tests/reference/clip_text.py's TINY.
ClipTextConfig tiny() {
  return ClipTextConfig{.vocab_size = 99,
                        .hidden_size = 32,
                        .intermediate_size = 48,
                        .num_hidden_layers = 2,
                        .num_attention_heads = 4,
                        .max_position_embeddings = 16,
                        .layer_norm_eps = 1e-5};
}

const testing::ReferenceCase& reference() {
  static const testing::ReferenceCase ref("clip_tiny");
  return ref;
}

std::shared_ptr<ClipTextEncoder> with_reference_weights() {
  auto model = std::make_shared<ClipTextEncoder>(tiny());
  testing::load_reference_parameters(*model, reference());
  return model;
}

TEST(ClipTextEncoder, HiddenStatesAndPooledMatchTheReferenceInF32) {
  const testing::ReferenceCase& ref = reference();
  const models::flux::ClipTextOutput out = with_reference_weights()->forward(ref.get("input_ids"));
  for (const auto& [name, actual] : {std::pair{"hidden", out.last_hidden_state}, std::pair{"pooled", out.pooled}}) {
    const Tensor expected = ref.get(name);
    const testing::Tolerance tol = testing::tolerance_for(DType::f32, expected);
    EXPECT_TRUE(testing::all_close(actual, expected, tol.atol, tol.rtol)) << name;
  }
}

TEST(ClipTextEncoder, TracksTheReferenceInBf16) {
  const testing::ReferenceCase& ref = reference();
  const auto model = with_reference_weights();
  model->to(DType::bf16);
  const models::flux::ClipTextOutput out = model->forward(ref.get("input_ids"));
  EXPECT_EQ(out.pooled.dtype(), DType::bf16);
  EXPECT_LT(testing::relative_l2_error(out.last_hidden_state.to(DType::f32), ref.get("hidden")), 3e-2);
  EXPECT_LT(testing::relative_l2_error(out.pooled.to(DType::f32), ref.get("pooled")), 3e-2);
}

// Causal: changing the last token moves only the last position's state; the
// pooled output of the first prompt (end-of-text at position 8) stays.
TEST(ClipTextEncoder, LaterTokensChangeNothingBefore) {
  const testing::ReferenceCase& ref = reference();
  const auto model = with_reference_weights();
  const Tensor ids = ref.get("input_ids");
  std::vector<int64_t> changed = ids.to_ints();
  changed[15] = 3;  // the first prompt's last padding position
  const models::flux::ClipTextOutput base = model->forward(ids),
                                     moved = model->forward(Tensor::from_vector(changed, ids.shape()));
  const std::vector<float> a = base.last_hidden_state.to_floats(), c = moved.last_hidden_state.to_floats();
  const size_t width = 32, last = 15 * width;
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(last), c.begin()));
  EXPECT_FALSE(std::equal(a.begin() + static_cast<std::ptrdiff_t>(last),
                          a.begin() + static_cast<std::ptrdiff_t>(last + width),
                          c.begin() + static_cast<std::ptrdiff_t>(last)));
  EXPECT_EQ(base.pooled.to_floats(), moved.pooled.to_floats());
}

TEST(ClipTextEncoder, BadIdsAndConfigsAreRefused) {
  const auto model = with_reference_weights();
  EXPECT_THROW(model->forward(Tensor::from_vector(std::vector<int64_t>{1, 99}, {1, 2})), Error);
  EXPECT_THROW(model->forward(Tensor::zeros({1, 17}, DType::i64)), Error);  // past max_position_embeddings
  ClipTextConfig odd = tiny();
  odd.num_attention_heads = 5;
  EXPECT_THROW(ClipTextEncoder{odd}, Error);
}

}  // namespace clip_text_encoder_test
}  // namespace titan
