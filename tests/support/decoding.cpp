#include "support/decoding.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "titan/autograd/grad_mode.h"
#include "titan/models/generate.h"
#include "titan/nn/functional.h"

namespace titan::testing {

Tensor cached_logits(const models::Decoder& model, const Tensor& ids, int64_t prefill) {
  autograd::NoGradGuard no_grad;
  const int64_t length = ids.size(1);
  models::KVCache cache = model.make_cache(1, length, DType::f32);
  Tensor logits = model.forward_cached(ids.narrow(1, 0, prefill).contiguous(), cache);
  for (int64_t t = prefill; t < length; ++t) {
    logits = F::concat(logits, model.forward_cached(ids.narrow(1, t, 1).contiguous(), cache), 1);
  }
  EXPECT_EQ(cache.length, length);
  return logits;
}

void expect_greedy_is_full_forward_argmax(const models::Decoder& model, const std::vector<int64_t>& prompt,
                                          int64_t new_tokens) {
  models::SamplingOptions greedy;
  greedy.max_new_tokens = new_tokens;
  const std::vector<int64_t> generated = models::generate(model, prompt, greedy);
  ASSERT_EQ(static_cast<int64_t>(generated.size()), new_tokens);
  std::vector<int64_t> sequence = prompt;
  sequence.insert(sequence.end(), generated.begin(), generated.end());
  autograd::NoGradGuard no_grad;
  const Tensor logits =
      model.logits({Tensor::from_vector(sequence, {1, static_cast<int64_t>(sequence.size())}), {}, {}}).to(DType::f32);
  for (size_t i = 0; i < generated.size(); ++i) {
    const std::vector<float> row =
        logits.select(1, static_cast<int64_t>(prompt.size() + i) - 1).contiguous().to_floats();
    EXPECT_EQ(generated[i], std::max_element(row.begin(), row.end()) - row.begin()) << "generated token " << i;
  }
}

}  // namespace titan::testing
