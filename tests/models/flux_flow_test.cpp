// FLUX's rectified-flow pieces (models/flux/flow_matching.h) against their
// formulas: the interpolation and its velocity target, SD3/FLUX.1's
// resolution-dependent time shift, the logit-normal timestep sampler (its
// statistics over many draws), the sampling schedule, and the 2x2 latent
// packing (every element's place, and the round trip); Euler integration
// against the exact sums and products it must give.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "titan/models/flux/flow_matching.h"
#include "titan/models/flux/flux_sampling.h"
#include "titan/ops/random.h"

namespace titan {
namespace flux_flow_test {

using namespace models::flux;  // the functions under test

TEST(FluxFlow, PairIsTheStraightLineAndItsVelocity) {
  Generator generator(5);
  const Tensor x0 = Tensor::empty({3, 2, 4, 4}), noise = Tensor::empty({3, 2, 4, 4});
  ops::normal_(x0, 0.0, 1.0, generator);
  ops::normal_(noise, 0.0, 1.0, generator);
  const std::vector<float> t = {0.0f, 0.37f, 1.0f};
  const FlowPair pair = flow_pair(x0, noise, Tensor::from_floats(t, {3}));
  const std::vector<float> a = x0.to_floats(), b = noise.to_floats(), noised = pair.noised.to_floats(),
                           target = pair.target.to_floats();
  const size_t per_sample = a.size() / 3;
  for (size_t i = 0; i < a.size(); ++i) {
    const double ti = t[i / per_sample];
    EXPECT_NEAR(noised[i], (1.0 - ti) * a[i] + ti * b[i], 1e-6) << i;
    EXPECT_EQ(target[i], b[i] - a[i]) << i;
  }
}

TEST(FluxFlow, ShiftMuIsLinearInTheImageTokens) {
  EXPECT_DOUBLE_EQ(shift_mu(256), 0.5);
  EXPECT_DOUBLE_EQ(shift_mu(4096), 1.15);
  EXPECT_NEAR(shift_mu(1024), 0.5 + 0.65 * 768.0 / 3840.0, 1e-12);
}

TEST(FluxFlow, TimeShiftIsTheFormula) {
  for (const double t : {0.1, 0.5, 0.9}) {
    EXPECT_NEAR(time_shift(0.0, 1.0, t), t, 1e-12);  // mu = 0, sigma = 1: no shift
    const double mu = 1.15;
    EXPECT_NEAR(time_shift(mu, 1.0, t), std::exp(mu) / (std::exp(mu) + 1.0 / t - 1.0), 1e-12);
    EXPECT_GT(time_shift(mu, 1.0, t), t);  // towards noise
  }
  EXPECT_EQ(time_shift(1.15, 1.0, 0.0), 0.0);
  EXPECT_EQ(time_shift(1.15, 1.0, 1.0), 1.0);
}

// 20,000 draws: the logits' mean and spread are the asked ones within five
// standard errors (mean: std / sqrt(n) = 0.007; spread: about std / sqrt(2n) = 0.005).
TEST(FluxFlow, TimestepsAreLogitNormal) {
  Generator generator(17);
  const int64_t n = 20000;
  const std::vector<float> t = sample_timesteps(n, 0.0, 1.0, 0.0, generator).to_floats();
  std::vector<double> logits;
  for (const float value : t) {
    ASSERT_GT(value, 0.0f);
    ASSERT_LT(value, 1.0f);
    logits.push_back(std::log(value / (1.0 - value)));
  }
  const double mean = std::accumulate(logits.begin(), logits.end(), 0.0) / n;
  double var = 0.0;
  for (const double x : logits) var += (x - mean) * (x - mean) / n;
  EXPECT_NEAR(mean, 0.0, 5 * 0.007);
  EXPECT_NEAR(std::sqrt(var), 1.0, 5 * 0.005);
  // Shifted: every draw moves as time_shift moves it (same generator state, same logits).
  Generator again(17);
  const std::vector<float> shifted = sample_timesteps(n, 0.0, 1.0, 1.15, again).to_floats();
  for (size_t i = 0; i < 100; ++i) EXPECT_NEAR(shifted[i], time_shift(1.15, 1.0, t[i]), 1e-6) << i;
}

TEST(FluxFlow, ScheduleRunsFromNoiseToDataShiftedByTheImageSize) {
  const std::vector<double> plain = sampling_schedule(4, 1024, false);
  EXPECT_EQ(plain, (std::vector<double>{1.0, 0.75, 0.5, 0.25, 0.0}));
  const std::vector<double> shifted = sampling_schedule(4, 1024, true);
  ASSERT_EQ(shifted.size(), 5u);
  EXPECT_EQ(shifted.front(), 1.0);
  EXPECT_EQ(shifted.back(), 0.0);
  for (size_t i = 1; i + 1 < shifted.size(); ++i) {
    EXPECT_NEAR(shifted[i], time_shift(shift_mu(1024), 1.0, plain[i]), 1e-12);
    EXPECT_LT(shifted[i], shifted[i - 1]);
  }
}

TEST(FluxFlow, PackingPutsEachPatchInItsToken) {
  const int64_t b = 2, c = 3, h = 4, w = 6;
  std::vector<float> values(static_cast<size_t>(b * c * h * w));
  std::iota(values.begin(), values.end(), 0.0f);
  const Tensor latents = Tensor::from_floats(values, {b, c, h, w});
  const Tensor packed = pack_latents(latents);
  ASSERT_EQ(packed.shape(), (Shape{b, (h / 2) * (w / 2), c * 4}));
  const std::vector<float> tokens = packed.to_floats();
  for (int64_t s = 0; s < b; ++s) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          const int64_t token = (y / 2) * (w / 2) + x / 2, feature = ch * 4 + (y % 2) * 2 + x % 2;
          EXPECT_EQ(tokens[static_cast<size_t>((s * (h / 2) * (w / 2) + token) * c * 4 + feature)],
                    values[static_cast<size_t>(((s * c + ch) * h + y) * w + x)]);
        }
      }
    }
  }
  EXPECT_EQ(unpack_latents(packed, h, w).to_floats(), values);
  const std::vector<int64_t> ids = latent_position_ids(b, h, w).to_ints();
  ASSERT_EQ(ids.size(), static_cast<size_t>(b * 6 * 3));
  for (int64_t token = 0; token < 6; ++token) {
    EXPECT_EQ(ids[static_cast<size_t>(token * 3)], 0);
    EXPECT_EQ(ids[static_cast<size_t>(token * 3 + 1)], token / 3);
    EXPECT_EQ(ids[static_cast<size_t>(token * 3 + 2)], token % 3);
  }
}

// A constant velocity c moves the tokens by c * (t_n - t_0) = -c; the field
// v = x multiplies them by the product of (1 + dt) over the steps.
TEST(FluxFlow, EulerStepsAreTheSumsAndProducts) {
  const std::vector<double> schedule = sampling_schedule(5, 1024, true);
  const Tensor noise = Tensor::from_floats(std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f}, {1, 2, 2});
  const Tensor c = Tensor::from_floats(std::vector<float>{0.1f, 0.2f, -0.3f, 1.0f}, {1, 2, 2});
  const std::vector<float> moved =
      euler_integrate([&](const Tensor&, double) { return c; }, noise, schedule).to_floats();
  const std::vector<float> grown =
      euler_integrate([](const Tensor& x, double) { return x; }, noise, schedule).to_floats();
  double product = 1.0;
  for (size_t i = 0; i + 1 < schedule.size(); ++i) product *= 1.0 + (schedule[i + 1] - schedule[i]);
  const std::vector<float> start = noise.to_floats(), step = c.to_floats();
  for (size_t i = 0; i < start.size(); ++i) {
    EXPECT_NEAR(moved[i], start[i] - step[i], 1e-6) << i;
    EXPECT_NEAR(grown[i], start[i] * product, 1e-6) << i;
  }
  EXPECT_THROW(euler_integrate([](const Tensor& x, double) { return x; }, noise, {1.0}), Error);
}

TEST(FluxFlow, BadShapesAreRefused) {
  EXPECT_THROW(pack_latents(Tensor::zeros({1, 2, 3, 4})), Error);
  EXPECT_THROW(unpack_latents(Tensor::zeros({1, 5, 8}), 4, 4), Error);
  EXPECT_THROW(flow_pair(Tensor::zeros({2, 3}), Tensor::zeros({2, 4}), Tensor::zeros({2})), Error);
  EXPECT_THROW(flow_pair(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}), Tensor::zeros({3})), Error);
  EXPECT_THROW(sampling_schedule(0, 256, true), Error);
}

}  // namespace flux_flow_test
}  // namespace titan
