#include "titan/models/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "titan/autograd/grad_mode.h"
#include "titan/core/philox.h"

namespace titan::models {

int64_t sample_token(std::span<const float> logits, const SamplingOptions& options, double uniform) {
  TITAN_CHECK(!logits.empty(), "sample_token: empty logits");
  TITAN_CHECK(options.temperature >= 0.0 && options.top_k >= 0 && options.top_p > 0.0 && options.top_p <= 1.0,
              "sampling: needs temperature >= 0, top_k >= 0 and 0 < top_p <= 1 (got {}, {}, {})", options.temperature,
              options.top_k, options.top_p);
  if (options.temperature == 0.0) {
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  }
  // Candidates sorted by logit, best first; ties keep the lower id first.
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  size_t keep = order.size();
  if (options.top_k > 0) keep = std::min(keep, static_cast<size_t>(options.top_k));
  std::vector<double> probabilities(keep);
  const double top = logits[order[0]];
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    probabilities[i] = std::exp((logits[order[i]] - top) / options.temperature);
    total += probabilities[i];
  }
  // Nucleus: the shortest prefix whose probability reaches top_p (at least one token).
  double cumulative = 0.0;
  size_t nucleus = keep;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += probabilities[i] / total;
    if (cumulative >= options.top_p) {
      nucleus = i + 1;
      break;
    }
  }
  double nucleus_total = 0.0;
  for (size_t i = 0; i < nucleus; ++i) nucleus_total += probabilities[i];
  double target = uniform * nucleus_total;
  for (size_t i = 0; i < nucleus; ++i) {
    target -= probabilities[i];
    if (target < 0.0) return order[i];
  }
  return order[nucleus - 1];
}

std::vector<int64_t> generate(const Decoder& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                              const GenerationMesh& mesh) {
  TITAN_CHECK(!prompt.empty(), "generate: the prompt has no tokens");
  TITAN_CHECK(options.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0");
  autograd::NoGradGuard no_grad;
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + options.max_new_tokens;
  KVCache cache = model.make_cache(1, capacity, model.output_weight().dtype(), mesh.head_split);
  std::vector<int64_t> generated;
  Tensor input = Tensor::from_vector(prompt, {1, static_cast<int64_t>(prompt.size())});
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const Tensor logits = model.forward_cached(input, cache);
    const Tensor last = logits.select(1, logits.size(1) - 1).select(0, 0);
    const std::vector<float> row = last.to_floats();
    // A NaN or Inf logit has no meaningful next token: argmax would pick an
    // arbitrary id (or the stop token) and the text would look plausible.
    const auto bad = std::find_if(row.begin(), row.end(), [](float v) { return !std::isfinite(v); });
    TITAN_CHECK(bad == row.end(),
                "generate: the logits of new token {} (position {}) are not finite (logit {} of token id {}): the "
                "model's weights or activations hold NaN or Inf",
                i + 1, static_cast<int64_t>(prompt.size()) + i, *bad, bad - row.begin());
    const double uniform = philox_uniform(philox4x32_10(static_cast<uint64_t>(i), 0, options.seed).x[0]);
    int64_t token = sample_token(row, options, uniform);
    if (mesh.agree) token = mesh.agree(token);
    generated.push_back(token);
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) != options.stop_tokens.end()) break;
    input = Tensor::from_vector(std::vector<int64_t>{token}, {1, 1});
  }
  return generated;
}

}  // namespace titan::models
