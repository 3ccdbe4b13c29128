#include "titan/train/restart_choice.h"

#include <gtest/gtest.h>

namespace titan {
namespace restart_choice_test {

// The choice alone: the newest step every rank holds (own copy or the partner's), unless persistent is newer.
TEST(RestartChoice, NewestStepEveryRankCanRestore) {
  using train::RestoreSource;
  // Rank 1 lost step 12 (its own copy) but its partner holds it; rank 0 never wrote 14.
  const std::vector<std::set<int64_t>> own{{10, 12}, {10, 14}}, replica{{10, 12}, {12}};
  train::RestartChoice choice = train::choose_restart(own, replica, 5);
  EXPECT_EQ(choice.step, 12);
  EXPECT_EQ(choice.tier, RestoreSource::replica);
  EXPECT_EQ(choice.per_rank, (std::vector<RestoreSource>{RestoreSource::own, RestoreSource::replica}));
  choice = train::choose_restart(own, replica, 12);  // as new: the persistent checkpoint
  EXPECT_EQ(choice.step, 12);
  EXPECT_EQ(choice.tier, RestoreSource::persistent);
  choice = train::choose_restart({{10}, {10}}, {{}, {}}, -1);
  EXPECT_EQ(choice.tier, RestoreSource::own);
  EXPECT_EQ(choice.step, 10);
  choice = train::choose_restart({{}, {10}}, {{}, {}}, -1);  // rank 0 holds nothing: start afresh
  EXPECT_EQ(choice.step, -1);
  EXPECT_EQ(choice.tier, RestoreSource::none);
}

}  // namespace restart_choice_test
}  // namespace titan
