#include "support/model_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/copy.h"
#include "titan/models/generate.h"
#include "titan/nn/functional.h"
#include "titan/ops/adamw.h"
#include "titan/optim/adamw.h"
#include "titan/optim/lr_schedule.h"

namespace titan::testing {

void load_reference_parameters(nn::Module& module, const ReferenceCase& ref) {
  const auto parameters = module.named_parameters();
  for (const auto& [name, parameter] : parameters) {
    EXPECT_TRUE(ref.has("param." + name)) << name << " is not a parameter of the reference";
    if (ref.has("param." + name)) titan::copy_(parameter->data, ref.get("param." + name));
  }
  const std::vector<std::string> names = ref.tensor_names();
  EXPECT_EQ(parameters.size(), static_cast<size_t>(std::count_if(names.begin(), names.end(), [](const std::string& n) {
              return n.rfind("param.", 0) == 0;
            })));
}

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

TrainingDrift expect_training_tracks_reference(models::Decoder& model, const ReferenceCase& ref, double loss_rtol,
                                               double norm_rtol, double weight_rtol) {
  std::map<std::string, Tensor> state = model.state_dict();
  for (auto& [name, tensor] : state) {
    if (ref.has("init." + name)) tensor = ref.get("init." + name);
  }
  for (const auto& [name, parameter] : model.named_parameters()) {
    EXPECT_TRUE(ref.has("init." + name)) << "the case has no initial value of " << name;
  }
  model.load_state_dict(state);

  std::vector<std::pair<std::string, Tensor>> named;
  for (const auto& [name, parameter] : model.named_parameters()) named.emplace_back(name, parameter->data);
  optim::AdamW adamw(named, {.beta1 = 0.9,
                             .beta2 = 0.95,
                             .eps = 1e-8,
                             .weight_decay = ref.meta_double("weight_decay"),
                             .no_weight_decay = {"norm", "tok_embeddings"}});
  const int64_t steps = ref.meta_int("steps");
  const optim::LrSchedule schedule{.warmup_steps = ref.meta_int("warmup"), .total_steps = steps};
  const std::vector<float> losses = ref.get("losses").to_floats(), norms = ref.get("grad_norms").to_floats();
  TrainingDrift drift;
  for (int64_t step = 1; step <= steps; ++step) {
    SCOPED_TRACE(fmt::format("step {}", step));
    model.zero_grad();
    const Tensor loss =
        model.loss({ref.get(fmt::format("input_ids.{}", step)), {}, {}}, ref.get(fmt::format("labels.{}", step)));
    autograd::backward({loss});
    std::vector<Tensor> grads;
    for (const auto& [name, parameter] : named) {
      if (parameter.grad().defined()) grads.push_back(parameter.grad());
    }
    const double norm = ops::clip_grad_norm_(grads, ref.meta_double("max_norm"));
    adamw.step(ref.meta_double("lr") * schedule.factor(step));
    const double want_loss = losses[static_cast<size_t>(step - 1)], want_norm = norms[static_cast<size_t>(step - 1)];
    const double loss_error = std::abs(loss.item() - want_loss) / want_loss;
    const double norm_error = std::abs(norm - want_norm) / want_norm;
    EXPECT_LT(loss_error, loss_rtol);
    EXPECT_LT(norm_error, norm_rtol);
    drift.loss = std::max(drift.loss, loss_error);
    drift.grad_norm = std::max(drift.grad_norm, norm_error);
  }
  for (const auto& [name, parameter] : named) {
    const double error = relative_l2_error(parameter, ref.get("final." + name));
    EXPECT_LT(error, weight_rtol) << name;
    drift.weight = std::max(drift.weight, error);
  }
  // The run must have learned: the last loss well below the first.
  EXPECT_LT(losses.back(), 0.9 * losses.front());
  return drift;
}

}  // namespace titan::testing
