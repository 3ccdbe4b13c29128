// The FLUX transformer (models/flux) against the float64 plain-PyTorch FLUX
// of tests/reference/flux.py fed the same weights and inputs: the predicted
// velocity, the flow-matching loss and every parameter's gradient in f32, and
// the same in bf16 mixed precision; the functions it is made of against their
// formulas; the flavors' sizes against the published model; bad inputs and
// configs refused with the field named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <string>

#include "models/flux_tiny_case.h"
#include "support/model_checks.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/models/flux/flux_model.h"
#include "titan/models/flux/flux_sampling.h"
#include "titan/nn/functional.h"
#include "titan/parallel/mixed_precision.h"

namespace titan {
namespace flux_test {

using models::flux::FluxConfig;
using models::flux::FluxInputs;
using models::flux::FluxModel;

FluxConfig tiny() { return testing::flux_tiny_config(); }
const testing::ReferenceCase& reference() { return testing::flux_tiny_case(); }

std::shared_ptr<FluxModel> with_reference_weights() {
  auto model = std::make_shared<FluxModel>(tiny());
  testing::load_reference_parameters(*model, reference());
  return model;
}

FluxInputs reference_inputs(DType dtype = DType::f32) {
  const testing::ReferenceCase& ref = reference();
  return FluxInputs{.img = ref.get("img", dtype),
                    .img_ids = ref.get("img_ids"),
                    .txt = ref.get("txt", dtype),
                    .txt_ids = ref.get("txt_ids"),
                    .timesteps = ref.get("timesteps"),
                    .y = ref.get("y", dtype),
                    .guidance = ref.get("guidance")};
}

// The flow-matching objective: the mean squared error of the velocity.
Tensor mse(const Tensor& velocity, const Tensor& target) {
  const Tensor difference = F::sub(velocity, target);
  return F::mean(F::mul(difference, difference));
}

TEST(FluxParity, VelocityLossAndGradientsInF32) {
  const testing::ReferenceCase& ref = reference();
  const auto model = with_reference_weights();
  const Tensor velocity = model->forward(reference_inputs());
  const Tensor expected = ref.get("velocity");
  const testing::Tolerance tol = testing::tolerance_for(DType::f32, expected);
  EXPECT_TRUE(testing::all_close(velocity, expected, tol.atol, tol.rtol));
  const Tensor loss = mse(velocity, ref.get("target"));
  EXPECT_NEAR(loss.item(), ref.get("loss").item(), 1e-5 * ref.get("loss").item());
  autograd::backward({loss});
  for (const auto& [name, parameter] : model->named_parameters()) {
    SCOPED_TRACE(name);
    const Tensor expected_grad = ref.get("grad." + name);
    const testing::Tolerance grad_tol = testing::tolerance_for(DType::f32, expected_grad);
    EXPECT_TRUE(testing::all_close(parameter->data.grad(), expected_grad, 5 * grad_tol.atol, 5 * grad_tol.rtol));
  }
}

// bf16 weights and activations over f32 master weights: whole-tensor relative
// errors against the float64 reference. A tiny model's rounding (8 bits per
// value, through 4 blocks) stays near 1%; 5% leaves room and catches any
// wrong term, which moves the result by its whole size.
TEST(FluxParity, TracksTheReferenceInBf16) {
  const testing::ReferenceCase& ref = reference();
  const auto model = with_reference_weights();
  parallel::apply_mixed_precision(*model, DType::bf16);
  const Tensor velocity = model->forward(reference_inputs(DType::bf16));
  EXPECT_EQ(velocity.dtype(), DType::bf16);
  EXPECT_LT(testing::relative_l2_error(velocity.to(DType::f32), ref.get("velocity")), 5e-2);
  const Tensor loss = mse(F::cast(velocity, DType::f32), ref.get("target"));
  EXPECT_NEAR(loss.item(), ref.get("loss").item(), 2e-2 * ref.get("loss").item());
  autograd::backward({loss});
  for (const auto& [name, parameter] : model->named_parameters()) {
    EXPECT_LT(testing::relative_l2_error(parameter->data.grad(), ref.get("grad." + name)), 5e-2) << name;
  }
}

// Each piece switched off moves the velocity: the guidance embedding, the
// positions of each RoPE axis, the text stream.
TEST(FluxParity, GuidancePositionsAndTextEachMatter) {
  const auto model = with_reference_weights();
  const Tensor base = model->forward(reference_inputs());
  const auto moved = [&](const FluxInputs& inputs) { return testing::relative_l2_error(model->forward(inputs), base); };
  FluxInputs other_guidance = reference_inputs();
  other_guidance.guidance = Tensor::from_floats(std::vector<float>{1.0f, 3.5f}, {2});
  EXPECT_GT(moved(other_guidance), 1e-3);
  for (int64_t axis = 0; axis < 3; ++axis) {
    FluxInputs shifted = reference_inputs();
    const Tensor ids = (axis == 0 ? shifted.txt_ids : shifted.img_ids).clone();
    std::vector<int64_t> values = ids.to_ints();
    for (size_t i = static_cast<size_t>(axis); i < values.size(); i += 3) values[i] = (values[i] * 3 + 1) % 7;
    (axis == 0 ? shifted.txt_ids : shifted.img_ids) = Tensor::from_vector(values, ids.shape());
    EXPECT_GT(moved(shifted), 1e-4) << "axis " << axis;
  }
  FluxInputs other_text = reference_inputs();
  other_text.txt = F::scale(other_text.txt, -1.0f);
  EXPECT_GT(moved(other_text), 1e-3);
}

// Guidance: the field is v_u + s (v_c - v_u) of the model's two predictions at
// the step's tokens and time.
TEST(FluxSampling, ClassifierFreeGuidanceCombinesBothPredictions) {
  const auto model = with_reference_weights();
  const FluxInputs conditional = reference_inputs();
  FluxInputs unconditional = reference_inputs();
  unconditional.txt = Tensor::zeros(unconditional.txt.shape());
  unconditional.y = Tensor::zeros(unconditional.y.shape());
  const Tensor x = F::scale(conditional.img, 0.5f);
  const double t = 0.6;
  const auto direct = [&](FluxInputs inputs) {
    inputs.img = x;
    inputs.timesteps = Tensor::full({2}, t);
    return model->forward(inputs).to_floats();
  };
  const std::vector<float> v_c = direct(conditional), v_u = direct(unconditional);
  const std::vector<float> guided =
      models::flux::flux_velocity(*model, conditional, &unconditional, 4.0)(x, t).to_floats();
  const std::vector<float> plain = models::flux::flux_velocity(*model, conditional)(x, t).to_floats();
  ASSERT_EQ(guided.size(), v_c.size());
  double moved = 0.0;
  for (size_t i = 0; i < v_c.size(); ++i) {
    EXPECT_NEAR(guided[i], v_u[i] + 4.0 * (v_c[i] - v_u[i]), 1e-5) << i;
    EXPECT_EQ(plain[i], v_c[i]) << i;
    moved = std::max(moved, std::abs(double{v_c[i]} - v_u[i]));
  }
  EXPECT_GT(moved, 1e-3);  // the prompt matters, so the guidance does
}

TEST(FluxFunctions, LayerNormWithoutAffineIsTheFormula) {
  const Tensor x = Tensor::from_floats(std::vector<float>{1.0f, -2.0f, 4.0f, 0.5f, 3.0f, 3.0f, -1.0f, 7.0f}, {2, 4});
  const std::vector<float> got = models::flux::layer_norm_without_affine(x, 1e-6f).to_floats();
  const std::vector<float> values = x.to_floats();
  for (int64_t row = 0; row < 2; ++row) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < 4; ++i) mean += values[static_cast<size_t>(row * 4 + i)] / 4.0;
    for (int64_t i = 0; i < 4; ++i) var += std::pow(values[static_cast<size_t>(row * 4 + i)] - mean, 2) / 4.0;
    for (int64_t i = 0; i < 4; ++i) {
      const auto at = static_cast<size_t>(row * 4 + i);
      EXPECT_NEAR(got[at], (values[at] - mean) / std::sqrt(var + 1e-6), 1e-6) << row << ", " << i;
    }
  }
}

TEST(FluxFunctions, GeluTanhIsTheFormula) {
  const std::vector<float> values = {-6.0f, -2.5f, -0.7f, 0.0f, 0.3f, 1.9f, 4.0f};
  const Tensor x = Tensor::from_floats(values, {static_cast<int64_t>(values.size())});
  const std::vector<float> got = models::flux::gelu_tanh(x).to_floats();
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    const double expected = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(got[i], expected, 1e-6) << v;
  }
}

// Black Forest Labs' embedding: cos of t * 1000 * 10000^(-i / half) for each
// i, then the sins. t = 0 gives ones then zeros.
TEST(FluxFunctions, TimestepEmbeddingIsTheFormula) {
  const Tensor t = Tensor::from_floats(std::vector<float>{0.0f, 0.25f}, {2});
  const std::vector<float> got = models::flux::timestep_embedding(t, 8).to_floats();
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got[static_cast<size_t>(i)], 1.0f);
    EXPECT_EQ(got[static_cast<size_t>(4 + i)], 0.0f);
    const double angle = 250.0 * std::pow(10000.0, -static_cast<double>(i) / 4.0);
    EXPECT_NEAR(got[static_cast<size_t>(8 + i)], std::cos(angle), 1e-4) << i;
    EXPECT_NEAR(got[static_cast<size_t>(12 + i)], std::sin(angle), 1e-4) << i;
  }
}

// FLUX.1's transformer is published as 12 billion parameters, 23.8 GB in bf16
// (2 bytes each: 11.9 billion). schnell is dev without the guidance embedder.
TEST(FluxFlavors, SizesAreThePublishedModels) {
  const auto count = [](const std::string& flavor) {
    return FluxModel(models::flux::flux_flavor(flavor), Device::meta()).num_parameters();
  };
  const int64_t dev = count("flux-dev"), schnell = count("flux-schnell");
  EXPECT_NEAR(static_cast<double>(dev), 11.9e9, 0.01e9);
  const int64_t hidden = 3072, guidance_embedder = (256 * hidden + hidden) + (hidden * hidden + hidden);
  EXPECT_EQ(dev - schnell, guidance_embedder);
  FluxModel debug(models::flux::flux_flavor("flux-debug"), Device::meta());
  EXPECT_EQ(debug.double_blocks.size(), 2u);
  EXPECT_EQ(debug.single_blocks.size(), 2u);
  EXPECT_EQ(debug.config.hidden_size, 1536);
}

// TorchTitan's initialisation: zero modulations and output (every block
// starts as the identity and the velocity as zero), Xavier-uniform
// projections (within sqrt(6 / (in + out)), spread bound / sqrt(3)).
TEST(FluxFlavors, InitialisationIsTorchTitans) {
  FluxModel model(tiny());
  model.init_weights(Generator(1));
  for (const auto& [name, parameter] : model.named_parameters()) {
    const std::vector<float> values = parameter->data.to_floats();
    const bool zero = name.find("_mod.") != std::string::npos || name.find("modulation") != std::string::npos ||
                      name.rfind("final_layer.", 0) == 0 || name.find(".bias") != std::string::npos;
    if (zero) {
      EXPECT_TRUE(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; })) << name;
    }
    if (name.find("qkv.weight") != std::string::npos || name.find("linear1.weight") != std::string::npos) {
      const Shape& shape = parameter->data.shape();
      const double bound = std::sqrt(6.0 / static_cast<double>(shape[0] + shape[1]));
      double sum_squares = 0.0;
      for (const float v : values) {
        EXPECT_LE(std::abs(v), bound) << name;
        sum_squares += double{v} * v;
      }
      EXPECT_NEAR(std::sqrt(sum_squares / static_cast<double>(values.size())), bound / std::sqrt(3.0), 0.05 * bound)
          << name;
    }
  }
  const std::vector<float> velocity = model.forward(reference_inputs()).to_floats();
  EXPECT_TRUE(std::all_of(velocity.begin(), velocity.end(), [](float v) { return v == 0.0f; }));
}

TEST(FluxFlavors, BadConfigsAndInputsNameTheField) {
  const auto message = [](const std::function<void()>& action) {
    try {
      action();
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  FluxConfig bad_axes = tiny();
  bad_axes.axes_dim = {4, 6, 8};
  EXPECT_NE(message([&] { FluxModel model(bad_axes); }).find("axes_dim"), std::string::npos);
  FluxConfig bad_heads = tiny();
  bad_heads.num_heads = 5;
  EXPECT_NE(message([&] { FluxModel model(bad_heads); }).find("num_heads"), std::string::npos);
  EXPECT_NE(message([] { models::flux::flux_flavor("flux-pro"); }).find("flux-pro"), std::string::npos);

  const auto model = with_reference_weights();
  FluxInputs no_guidance = reference_inputs();
  no_guidance.guidance = Tensor();
  EXPECT_NE(message([&] { model->forward(no_guidance); }).find("guidance"), std::string::npos);
  FluxInputs wrong_text = reference_inputs();
  wrong_text.txt = wrong_text.txt.narrow(2, 0, 40).contiguous();
  EXPECT_NE(message([&] { model->forward(wrong_text); }).find("txt"), std::string::npos);
  FluxInputs wrong_ids = reference_inputs();
  wrong_ids.img_ids = wrong_ids.img_ids.narrow(1, 0, 3).contiguous();
  EXPECT_NE(message([&] { model->forward(wrong_ids); }).find("img_ids"), std::string::npos);
}

}  // namespace flux_test
}  // namespace titan
