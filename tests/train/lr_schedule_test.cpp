// The warmup-stable-decay schedule against TorchTitan's: its formula written
// in Python and stepped by PyTorch's LambdaLR (tests/reference/lr_schedule.py),
// for 1,000 random parameter sets; and the worked example.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "data/peer_support.h"
#include "titan/core/error.h"
#include "titan/optim/lr_schedule.h"

namespace titan {
namespace lr_schedule_test {

using data::testing::run_command;
using data::testing::shell_quote;
using data::testing::TempDir;

// Warmup 2, decay_ratio 0.5, 8 steps, min_lr_factor 0.1: TorchTitan keeps the
// peak through step 5 (one stable step more than "the last 4 steps decay")
// and ends above min_lr, at 1 - 3/4 of the way down.
TEST(LrSchedule, KeepsTorchTitansExtraStableStepAndVirtualLastStep) {
  const optim::LrSchedule s{
      .warmup_steps = 2, .total_steps = 8, .decay_ratio = 0.5, .decay_type = "linear", .min_lr_factor = 0.1};
  EXPECT_DOUBLE_EQ(s.factor(1), 0.5);
  EXPECT_DOUBLE_EQ(s.factor(5), 1.0);
  EXPECT_DOUBLE_EQ(s.factor(6), 0.1 + 0.9 * 0.75);
  EXPECT_DOUBLE_EQ(s.factor(8), 0.1 + 0.9 * 0.25);
  // Steps past the schedule (lr_scheduler.total_steps < training.steps) keep its last factor.
  EXPECT_DOUBLE_EQ(s.factor(20), s.factor(8));
  const optim::LrSchedule bad{.warmup_steps = 0, .total_steps = 4, .decay_type = "exp"};
  EXPECT_THROW(bad.factor(3), Error);
}

// Python's round() sends halves to the even integer: 0.5 x 5 = 2.5 decays over 2 steps, not 3.
TEST(LrSchedule, DecayStepsRoundHalvesToEvenAsPythonDoes) {
  EXPECT_EQ((optim::LrSchedule{.warmup_steps = 0, .total_steps = 5, .decay_ratio = 0.5}.decay_steps()), 2);
  EXPECT_EQ((optim::LrSchedule{.warmup_steps = 0, .total_steps = 7, .decay_ratio = 0.5}.decay_steps()), 4);
  // Warmup and decay that overlap: the decay gets what warmup leaves.
  EXPECT_EQ((optim::LrSchedule{.warmup_steps = 6, .total_steps = 8, .decay_ratio = 0.5}.decay_steps()), 2);
}

TEST(LrSchedule, EqualsTorchTitansOnAThousandRandomSchedules) {
  std::mt19937_64 random(20261205);
  const char* types[] = {"linear", "sqrt", "cosine"};
  std::vector<optim::LrSchedule> schedules;
  TempDir dir;
  {
    std::ofstream sets(dir / "sets.jsonl");
    for (int i = 0; i < 1000; ++i) {
      optim::LrSchedule s;
      s.total_steps = std::uniform_int_distribution<int64_t>(1, 120)(random);
      // Warmup up to past the end (clamped), decay ratios from none to all, halves included.
      s.warmup_steps = std::uniform_int_distribution<int64_t>(0, s.total_steps + 10)(random);
      const int kind = std::uniform_int_distribution<int>(0, 3)(random);
      s.decay_ratio = kind == 0 ? -1.0
                      : kind == 1
                          ? static_cast<double>(std::uniform_int_distribution<int64_t>(0, 2 * s.total_steps)(random)) /
                                static_cast<double>(2 * s.total_steps)
                          : std::uniform_real_distribution<double>(0.0, 1.0)(random);
      s.decay_type = types[std::uniform_int_distribution<int>(0, 2)(random)];
      s.min_lr_factor = std::uniform_int_distribution<int>(0, 1)(random) == 0
                            ? 0.0
                            : std::uniform_real_distribution<double>(0.0, 0.5)(random);
      nlohmann::json set{{"warmup_steps", s.warmup_steps},
                         {"total_steps", s.total_steps},
                         {"decay_ratio", nullptr},
                         {"decay_type", s.decay_type},
                         {"min_lr_factor", s.min_lr_factor}};
      if (s.decay_ratio >= 0.0) set["decay_ratio"] = s.decay_ratio;
      sets << set.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict) << "\n";
      schedules.push_back(s);
    }
  }
  const auto run = run_command(fmt::format(
      "{} {} {} {}", TITAN_PYTHON, shell_quote(std::string(TITAN_REFERENCE_SCRIPTS_DIR) + "/lr_schedule.py"),
      shell_quote((dir / "sets.jsonl").string()), shell_quote((dir / "factors.jsonl").string())));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream factors(dir / "factors.jsonl");
  size_t compared = 0;
  std::string line;
  for (const optim::LrSchedule& s : schedules) {
    ASSERT_TRUE(std::getline(factors, line)) << "the reference wrote " << compared << " schedules";
    const std::vector<double> expected = nlohmann::json::parse(line);
    ASSERT_EQ(static_cast<int64_t>(expected.size()), s.total_steps);
    for (int64_t step = 1; step <= s.total_steps; ++step) {
      // Same operations on the same doubles: equal to the last bits, but for the order of the warmup division.
      ASSERT_NEAR(s.factor(step), expected[static_cast<size_t>(step - 1)], 1e-14)
          << "step " << step << " of warmup " << s.warmup_steps << ", total " << s.total_steps << ", decay_ratio "
          << s.decay_ratio << ", " << s.decay_type << ", min_lr_factor " << s.min_lr_factor;
    }
    ++compared;
  }
  EXPECT_EQ(compared, 1000u);
}

}  // namespace lr_schedule_test
}  // namespace titan
