#include "titan/plan/pipeline_timing.h"

#include <map>
#include <tuple>
#include <vector>

#include "titan/core/error.h"

namespace titan::plan {

void run_schedule(const parallel::pipeline::Schedule& schedule, const PipelineCallbacks& callbacks) {
  using parallel::pipeline::ActionType;
  const size_t ranks = schedule.actions.size();
  std::vector<size_t> next(ranks, 0);
  // (0 forward / 1 backward, the sending stage, micro-batch) -> when it left, when it arrives.
  std::map<std::tuple<int, int, int>, std::pair<double, double>> messages;
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t rank = 0; rank < ranks; ++rank) {
      const auto& actions = schedule.actions[rank];
      while (next[rank] < actions.size()) {
        const parallel::pipeline::Action& action = actions[next[rank]];
        const int r = static_cast<int>(rank);
        if (action.type == ActionType::recv_forward || action.type == ActionType::recv_backward) {
          const bool forward = action.type == ActionType::recv_forward;
          const auto found = messages.find(
              std::make_tuple(forward ? 0 : 1, forward ? action.stage - 1 : action.stage + 1, action.microbatch));
          if (found == messages.end()) break;  // its sender has not got there yet
          callbacks.receive(r, action, found->second.first, found->second.second);
        } else if (action.type == ActionType::send_forward || action.type == ActionType::send_backward) {
          const bool forward = action.type == ActionType::send_forward;
          messages[std::make_tuple(forward ? 0 : 1, action.stage, action.microbatch)] = callbacks.send(r, action);
        } else {
          callbacks.compute(r, action);
        }
        ++next[rank];
        progress = true;
      }
    }
  }
  for (size_t rank = 0; rank < ranks; ++rank) {
    TITAN_CHECK(next[rank] == schedule.actions[rank].size(),
                "plan: the pipeline schedule {} cannot complete: rank {} waits at action {} of {}", schedule.name, rank,
                next[rank], schedule.actions[rank].size());
  }
}

}  // namespace titan::plan
