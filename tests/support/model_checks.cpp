#include "support/model_checks.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/models/generate.h"
#include "titan/nn/functional.h"

namespace titan::testing {

void expect_f32_parity_with_reference(models::Decoder& model, const ReferenceCase& ref,
                                      const models::DecoderInputs& inputs) {
  const Tensor expected_logits = ref.get("logits");
  const Tolerance tol = tolerance_for(DType::f32, expected_logits);
  EXPECT_TRUE(all_close(model.logits(inputs).view(expected_logits.shape()), expected_logits, tol.atol, tol.rtol));
  const Tensor loss = model.loss(inputs, ref.get("labels"));
  EXPECT_NEAR(loss.item(), ref.get("loss").item(), 1e-5 * ref.get("loss").item());
  autograd::backward({loss});
  for (const auto& [name, parameter] : model.named_parameters()) {
    SCOPED_TRACE(name);
    const Tensor expected = ref.get("grad." + name);
    const Tolerance grad_tol = tolerance_for(DType::f32, expected);
    EXPECT_TRUE(all_close(parameter->data.grad(), expected, 5 * grad_tol.atol, 5 * grad_tol.rtol));
  }
}

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
