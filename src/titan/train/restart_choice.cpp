#include "titan/train/restart_choice.h"

#include <algorithm>

namespace titan::train {

RestartChoice choose_restart(const std::vector<std::set<int64_t>>& own, const std::vector<std::set<int64_t>>& replica,
                             int64_t persistent) {
  RestartChoice choice;
  std::set<int64_t> candidates;
  for (const auto& steps : own) candidates.insert(steps.begin(), steps.end());
  for (const auto& steps : replica) candidates.insert(steps.begin(), steps.end());
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    const int64_t step = *it;
    if (step <= persistent) break;
    std::vector<RestoreSource> sources;
    for (size_t r = 0; r < own.size(); ++r) {
      if (own[r].count(step)) {
        sources.push_back(RestoreSource::own);
      } else if (r < replica.size() && replica[r].count(step)) {
        sources.push_back(RestoreSource::replica);
      } else {
        break;
      }
    }
    if (sources.size() != own.size()) continue;
    choice.step = step;
    const bool any_replica = std::count(sources.begin(), sources.end(), RestoreSource::replica) > 0;
    choice.tier = any_replica ? RestoreSource::replica : RestoreSource::own;
    choice.per_rank = std::move(sources);
    return choice;
  }
  if (persistent >= 0) {
    choice.step = persistent;
    choice.tier = RestoreSource::persistent;
  }
  return choice;
}

}  // namespace titan::train
