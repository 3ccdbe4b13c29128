// Which tier a restart loads from, decided from what every rank holds: a pure
// function, so the choice is tested without processes (the fast tiers that
// feed it: train/fast_tier.h).
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace titan::train {

// Where a rank's state comes from at a restart.
enum class RestoreSource { none, own, replica, persistent };

struct RestartChoice {
  int64_t step = -1;  // -1: nothing to resume
  RestoreSource tier = RestoreSource::none;
  std::vector<RestoreSource> per_rank;  // own or replica for each rank when tier is own/replica
};

// The restart's pure decision: the newest step every rank can restore from
// its own fast tier (`own[r]`) or its partner's replica (`replica[r]`), unless
// the newest persistent step (`persistent`, -1: none) is as new or newer. A
// rank prefers its own copy.
RestartChoice choose_restart(const std::vector<std::set<int64_t>>& own, const std::vector<std::set<int64_t>>& replica,
                             int64_t persistent);

}  // namespace titan::train
