// The warmup-stable-decay schedule against its definition at chosen steps.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "titan/core/error.h"
#include "titan/optim/lr_schedule.h"

namespace titan {
namespace {

TEST(LrSchedule, WarmupThenLinearDecayToMin) {
  optim::LrSchedule s{.warmup_steps = 4, .total_steps = 12, .decay_type = "linear", .min_lr_factor = 0.1};
  EXPECT_DOUBLE_EQ(s.factor(1), 0.25);
  EXPECT_DOUBLE_EQ(s.factor(4), 1.0);
  EXPECT_DOUBLE_EQ(s.factor(8), 0.1 + 0.9 * 0.5);  // halfway through the 8 decay steps
  EXPECT_DOUBLE_EQ(s.factor(12), 0.1);
}

TEST(LrSchedule, StableThenDecayRatio) {
  optim::LrSchedule s{.warmup_steps = 2, .total_steps = 20, .decay_ratio = 0.25, .decay_type = "cosine"};
  EXPECT_DOUBLE_EQ(s.factor(10), 1.0);  // stable until step 15
  EXPECT_DOUBLE_EQ(s.factor(15), 1.0);
  EXPECT_NEAR(s.factor(17), 0.5 * (1 + std::cos(std::numbers::pi * 2 / 5)), 1e-15);
  EXPECT_NEAR(s.factor(20), 0.0, 1e-15);
  optim::LrSchedule root{.warmup_steps = 0, .total_steps = 4, .decay_type = "sqrt"};
  EXPECT_DOUBLE_EQ(root.factor(1), 1.0 - std::sqrt(0.25));
  optim::LrSchedule bad{.warmup_steps = 0, .total_steps = 4, .decay_type = "exp"};
  EXPECT_THROW(bad.factor(2), Error);
}

}  // namespace
}  // namespace titan
