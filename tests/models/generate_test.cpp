// Generation: the KV-cached forward equals the full forward, and the sampler
// follows greedy / top-k / top-p / temperature by definition.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>

#include "titan/autograd/grad_mode.h"
#include "titan/core/allocator.h"
#include "titan/models/generate.h"
#include "titan/models/memory_estimate.h"
#include "titan/models/model_spec.h"
#include "titan/ops/random.h"

namespace titan {
namespace generate_test {

models::SamplingOptions sampling(double temperature, int64_t top_k = 0, double top_p = 1.0, int64_t max_new = 64) {
  models::SamplingOptions options;
  options.temperature = temperature;
  options.top_k = top_k;
  options.top_p = top_p;
  options.max_new_tokens = max_new;
  return options;
}

std::shared_ptr<models::Decoder> small_model() {
  models::DecoderConfig config = models::model_config("qwen3", "debugmodel", 97);
  config.layers.resize(2);
  auto model = config.build();
  Generator generator(1);
  model->init_weights(generator);
  return model;
}

TEST(Generate, CachedForwardMatchesFullForward) {
  auto model = small_model();
  autograd::NoGradGuard no_grad;
  const std::vector<int64_t> ids{5, 17, 42, 8, 91, 3, 64};
  const Tensor full = model->logits({Tensor::from_vector(ids, {1, 7}), {}, {}});
  models::KVCache cache = model->make_cache(1, 10, DType::f32);
  // Prefill 4 tokens, then one at a time.
  const Tensor prefix =
      model->forward_cached(Tensor::from_vector(std::vector<int64_t>(ids.begin(), ids.begin() + 4), {1, 4}), cache);
  std::vector<Tensor> steps{prefix};
  for (size_t i = 4; i < ids.size(); ++i) {
    steps.push_back(model->forward_cached(Tensor::from_vector(std::vector<int64_t>{ids[i]}, {1, 1}), cache));
  }
  EXPECT_EQ(cache.length, 7);
  int64_t position = 0;
  for (const Tensor& step : steps) {
    for (int64_t t = 0; t < step.size(1); ++t, ++position) {
      const std::vector<float> a = step.select(1, t).to_floats(), b = full.select(1, position).to_floats();
      for (size_t v = 0; v < a.size(); ++v) ASSERT_NEAR(a[v], b[v], 1e-4) << "position " << position;
    }
  }
  EXPECT_THROW(model->forward_cached(Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4}, {1, 4}), cache), Error);
}

TEST(Generate, GreedyMatchesArgmaxOfFullForward) {
  auto model = small_model();
  const std::vector<int64_t> prompt{1, 2, 3};
  const std::vector<int64_t> generated = models::generate(*model, prompt, sampling(0.0, 0, 1.0, 5));
  ASSERT_EQ(generated.size(), 5u);
  std::vector<int64_t> sequence = prompt;
  autograd::NoGradGuard no_grad;
  for (int64_t token : generated) {
    const Tensor logits =
        model->logits({Tensor::from_vector(sequence, {1, static_cast<int64_t>(sequence.size())}), {}, {}});
    const std::vector<float> last = logits.select(1, logits.size(1) - 1).to_floats();
    EXPECT_EQ(token, std::max_element(last.begin(), last.end()) - last.begin());
    sequence.push_back(token);
  }
}

// What generation allocates (the KV cache of prompt + new tokens, the
// prompt's forward with its logits) stays within the estimate the generate
// command checks against the host's memory, and the KV cache, the part that
// grows with --max-new-tokens, is most of it for a long generation.
TEST(Generate, AllocationsStayWithinTheGenerationEstimate) {
  auto model = small_model();
  for (const auto& [prompt_tokens, new_tokens] : {std::pair<int64_t, int64_t>{3, 200}, {40, 2}}) {
    SCOPED_TRACE(prompt_tokens);
    std::vector<int64_t> prompt(static_cast<size_t>(prompt_tokens));
    for (int64_t i = 0; i < prompt_tokens; ++i) prompt[static_cast<size_t>(i)] = 1 + i % 90;
    Allocator& host = allocator_for(DeviceType::cpu);
    const int64_t before = memory_stats(DeviceType::cpu).live_bytes;
    host.reset_peak();
    models::generate(*model, prompt, sampling(0.0, 0, 1.0, new_tokens));
    const double used = static_cast<double>(memory_stats(DeviceType::cpu).peak_bytes - before);
    const models::GenerationMemory estimate = models::estimate_generation_memory(
        model->config, DType::f32, prompt_tokens, prompt_tokens + new_tokens, omp_get_max_threads());
    EXPECT_LE(used, estimate.kv_cache_bytes + estimate.forward_bytes)
        << "kv cache " << estimate.kv_cache_bytes << ", forward " << estimate.forward_bytes;
    EXPECT_GT(used, estimate.kv_cache_bytes);
  }
}

TEST(Sampler, GreedyTopKTopP) {
  const std::vector<float> logits{0.0f, 2.0f, 1.0f, -1.0f};
  EXPECT_EQ(models::sample_token(logits, sampling(0.0), 0.9), 1);
  // top_k = 1 always picks the best, whatever the draw.
  for (double u : {0.0, 0.5, 0.999}) EXPECT_EQ(models::sample_token(logits, sampling(1.0, 1), u), 1);
  // Probabilities at temperature 1: softmax(0, 2, 1, -1) = (0.0871, 0.6439, 0.2369, 0.0321).
  // top_p 0.7: the nucleus is {1, 2} (0.644 < 0.7 <= 0.881); renormalised 0.731 / 0.269.
  EXPECT_EQ(models::sample_token(logits, sampling(1.0, 0, 0.7), 0.72), 1);
  EXPECT_EQ(models::sample_token(logits, sampling(1.0, 0, 0.7), 0.74), 2);
  EXPECT_THROW(models::sample_token(logits, sampling(-1.0), 0.5), Error);
}

// Drawn frequencies follow softmax(logits / T): with 20000 draws the standard
// error of each frequency is at most 0.0036, so 0.015 is over 4 sigma.
TEST(Sampler, FrequenciesFollowTemperature) {
  const std::vector<float> logits{0.5f, 1.5f, -0.5f};
  const double temperature = 0.7;
  std::vector<double> expected(3);
  double total = 0;
  for (int i = 0; i < 3; ++i) total += expected[i] = std::exp(logits[i] / temperature);
  Generator generator(9);
  Tensor uniforms = Tensor::empty({20000});
  ops::uniform_(uniforms, 0.0, 1.0, generator);
  std::vector<int> counts(3, 0);
  for (float u : uniforms.to_floats()) ++counts[models::sample_token(logits, sampling(temperature), u)];
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(counts[i] / 20000.0, expected[i] / total, 0.015) << i;
}

}  // namespace generate_test
}  // namespace titan
