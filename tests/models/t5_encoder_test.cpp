// FLUX's T5 v1.1 encoder (models/flux/t5_encoder.h) against the float64
// plain-PyTorch encoder of tests/reference/t5_encoder.py fed the same weights:
// the hidden states of a padded batch in f32 and in bf16, the relative
// position buckets of T5 v1.1's own configuration for every offset in
// -300..300, padding that changes nothing for the real tokens, and bad ids
// refused.
#include <gtest/gtest.h>

#include <string>

#include "support/model_checks.h"
#include "support/reference.h"
#include "titan/models/flux/t5_encoder.h"

namespace titan {
namespace t5_encoder_test {

using models::flux::T5Encoder;
using models::flux::T5EncoderConfig;

// tests/reference/t5_encoder.py's TINY.
T5EncoderConfig tiny() {
  return T5EncoderConfig{.vocab_size = 100,
                         .d_model = 32,
                         .d_kv = 8,
                         .num_heads = 4,
                         .d_ff = 48,
                         .num_layers = 2,
                         .relative_attention_num_buckets = 8,
                         .relative_attention_max_distance = 20,
                         .layer_norm_epsilon = 1e-6};
}

const testing::ReferenceCase& reference() {
  static const testing::ReferenceCase ref("t5_tiny");
  return ref;
}

std::shared_ptr<T5Encoder> with_reference_weights() {
  auto model = std::make_shared<T5Encoder>(tiny());
  testing::load_reference_parameters(*model, reference());
  return model;
}

TEST(T5Encoder, HiddenStatesMatchTheReferenceInF32) {
  const testing::ReferenceCase& ref = reference();
  const Tensor hidden = with_reference_weights()->forward(ref.get("input_ids"), ref.get("attention_mask"));
  const Tensor expected = ref.get("hidden");
  const testing::Tolerance tol = testing::tolerance_for(DType::f32, expected);
  EXPECT_TRUE(testing::all_close(hidden, expected, tol.atol, tol.rtol));
}

// bf16 weights and activations: 8 bits per value through two blocks stay
// well under 3% of the states' norm; a wrong term moves them by its size.
TEST(T5Encoder, TracksTheReferenceInBf16) {
  const testing::ReferenceCase& ref = reference();
  const auto model = with_reference_weights();
  model->to(DType::bf16);
  const Tensor hidden = model->forward(ref.get("input_ids"), ref.get("attention_mask"));
  EXPECT_EQ(hidden.dtype(), DType::bf16);
  EXPECT_LT(testing::relative_l2_error(hidden.to(DType::f32), ref.get("hidden")), 3e-2);
}

TEST(T5Encoder, BucketsAreT5V11s) {
  const testing::ReferenceCase& ref = reference();
  const std::vector<int64_t> offsets = ref.get("bucket_offsets").to_ints(),
                             expected = ref.get("buckets_32_128").to_ints();
  ASSERT_EQ(offsets.size(), expected.size());
  for (size_t i = 0; i < offsets.size(); ++i) {
    EXPECT_EQ(models::flux::t5_relative_position_bucket(offsets[i], 32, 128), expected[i]) << offsets[i];
  }
}

// The second prompt is 17 tokens and 7 of padding: its tokens' states are
// those of the 17 tokens encoded alone (relative positions, no mask).
TEST(T5Encoder, PaddingChangesNothingForTheTokens) {
  const testing::ReferenceCase& ref = reference();
  const auto model = with_reference_weights();
  const Tensor padded = model->forward(ref.get("input_ids"), ref.get("attention_mask"));
  const Tensor alone = model->forward(ref.get("input_ids").narrow(0, 1, 1).narrow(1, 0, 17).contiguous());
  const Tensor expected = padded.narrow(0, 1, 1).narrow(1, 0, 17).contiguous();
  const testing::Tolerance tol = testing::tolerance_for(DType::f32, expected);
  EXPECT_TRUE(testing::all_close(alone, expected, tol.atol, tol.rtol));
  // Without the mask the padding is attended to, and the states move.
  const Tensor unmasked = model->forward(ref.get("input_ids")).narrow(0, 1, 1).narrow(1, 0, 17).contiguous();
  EXPECT_GT(testing::relative_l2_error(unmasked, expected), 1e-3);
}

TEST(T5Encoder, BadIdsAndConfigsAreRefused) {
  const auto model = with_reference_weights();
  EXPECT_THROW(model->forward(Tensor::from_vector(std::vector<int64_t>{1, 100}, {1, 2})), Error);
  EXPECT_THROW(model->forward(Tensor::from_vector(std::vector<int64_t>{1, 2}, {1, 2}),
                              Tensor::from_vector(std::vector<int64_t>{1, 1, 1}, {1, 3})),
               Error);
  T5EncoderConfig odd = tiny();
  odd.relative_attention_num_buckets = 7;
  EXPECT_THROW(T5Encoder{odd}, Error);
}

}  // namespace t5_encoder_test
}  // namespace titan
