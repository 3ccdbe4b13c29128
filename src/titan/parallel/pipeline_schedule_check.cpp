// The checker runs in three passes, cheapest and most specific first: each
// action on its own (does its stage exist and live here, is it a repeat), then
// the schedule as a whole (is every send received, every micro-batch complete),
// and only then the replay that finds ordering errors and deadlocks, so that a
// schedule missing a send is reported as such and not as the hang it causes.
#include "titan/parallel/pipeline_schedule_check.h"

#include <algorithm>
#include <cmath>

#include "titan/core/error.h"

namespace titan::parallel::pipeline {

namespace {

constexpr int kActionTypes = 8;

struct Position {
  int rank = -1;
  int index = -1;
  bool exists() const { return rank >= 0; }
};

// Where every action of the schedule sits (each one at most once).
class ActionIndex {
 public:
  explicit ActionIndex(const Schedule& schedule)
      : stages_(schedule.stages),
        microbatches_(schedule.microbatches),
        cells_(static_cast<size_t>(kActionTypes) * stages_ * microbatches_) {}

  Position& operator[](const Action& a) { return cells_[slot(a)]; }
  size_t slot(const Action& a) const {
    return (static_cast<size_t>(a.type) * stages_ + a.stage) * microbatches_ + a.microbatch;
  }
  size_t size() const { return cells_.size(); }

 private:
  int stages_, microbatches_;
  std::vector<Position> cells_;
};

std::string describe(const Schedule& schedule, int rank, int index) {
  return fmt::format("rank {}, action {} '{}'", rank, index, action_string(schedule.actions[rank][index]));
}

std::string quoted(const std::vector<Action>& alternatives) {
  std::vector<std::string> names;
  names.reserve(alternatives.size());
  for (const Action& a : alternatives) names.push_back(fmt::format("'{}'", action_string(a)));
  return fmt::format("{}", fmt::join(names, " or "));
}

// The send a receive waits for.
Action matching_send(const Action& receive) {
  return receive.type == ActionType::recv_forward
             ? Action{ActionType::send_forward, receive.stage - 1, receive.microbatch}
             : Action{ActionType::send_backward, receive.stage + 1, receive.microbatch};
}

// The receive a send feeds.
Action matching_receive(const Action& send) {
  return send.type == ActionType::send_forward ? Action{ActionType::recv_forward, send.stage + 1, send.microbatch}
                                               : Action{ActionType::recv_backward, send.stage - 1, send.microbatch};
}

bool is_receive(ActionType type) { return type == ActionType::recv_forward || type == ActionType::recv_backward; }
bool is_send(ActionType type) { return type == ActionType::send_forward || type == ActionType::send_backward; }

// What an action needs done earlier on its own rank: each inner list is one
// need, met by any of its alternatives.
std::vector<std::vector<Action>> local_needs(const Schedule& schedule, int rank, const Action& a) {
  const int s = a.stage, m = a.microbatch, last = schedule.stages - 1;
  const auto here = [&](int stage) { return schedule.stage_rank[stage] == rank; };
  std::vector<std::vector<Action>> needs;
  switch (a.type) {
    case ActionType::forward:
      if (s > 0) {
        needs.push_back({here(s - 1) ? Action{ActionType::forward, s - 1, m} : Action{ActionType::recv_forward, s, m}});
      }
      break;
    case ActionType::full_backward:
    case ActionType::backward_input:
      needs.push_back({{ActionType::forward, s, m}});
      if (s < last) {
        if (here(s + 1)) {
          needs.push_back({{ActionType::full_backward, s + 1, m}, {ActionType::backward_input, s + 1, m}});
        } else {
          needs.push_back({{ActionType::recv_backward, s, m}});
        }
      }
      break;
    case ActionType::backward_weight:
      needs.push_back({{ActionType::backward_input, s, m}});
      break;
    case ActionType::send_forward:
      needs.push_back({{ActionType::forward, s, m}});
      break;
    case ActionType::send_backward:
      needs.push_back({{ActionType::full_backward, s, m}, {ActionType::backward_input, s, m}});
      break;
    case ActionType::recv_forward:
    case ActionType::recv_backward:
      break;  // waits on the peer instead
  }
  return needs;
}

// Pass 1: each action on its own.
void check_actions(const Schedule& schedule, ActionIndex& index) {
  const int last = schedule.stages - 1;
  for (int r = 0; r < schedule.ranks; ++r) {
    for (int i = 0; i < static_cast<int>(schedule.actions[r].size()); ++i) {
      const Action& a = schedule.actions[r][i];
      const std::string at = describe(schedule, r, i);
      TITAN_CHECK(a.stage >= 0 && a.stage <= last, "{}: there is no stage {} (the schedule has {} stages)", at, a.stage,
                  schedule.stages);
      TITAN_CHECK(a.microbatch >= 0 && a.microbatch < schedule.microbatches,
                  "{}: there is no micro-batch {} (the schedule has {} micro-batches)", at, a.microbatch,
                  schedule.microbatches);
      const int holder = schedule.stage_rank[a.stage];
      TITAN_CHECK(holder == r, "{}: runs stage {}, which rank {} does not hold (stage {} is on rank {})", at, a.stage,
                  r, a.stage, holder);
      if (is_send(a.type) || is_receive(a.type)) {
        const bool towards_next = a.type == ActionType::send_forward || a.type == ActionType::recv_backward;
        const int peer_stage = towards_next ? a.stage + 1 : a.stage - 1;
        TITAN_CHECK(peer_stage >= 0 && peer_stage <= last, "{}: stage {} has no neighbour stage {} to {}", at, a.stage,
                    peer_stage, is_send(a.type) ? "send to" : "receive from");
        TITAN_CHECK(schedule.stage_rank[peer_stage] != r,
                    "{}: stage {} is on this rank too, so the hand-off is local and there is nothing to {}", at,
                    peer_stage, is_send(a.type) ? "send" : "receive");
      }
      Position& seen = index[a];
      TITAN_CHECK(!seen.exists(), "{}: repeats action {} of the rank", at, seen.index);
      seen = {r, i};
    }
  }
}

// Pass 2: every send received and every receive sent; every micro-batch of
// every stage run forward and backward exactly once.
void check_whole(const Schedule& schedule, ActionIndex& index) {
  for (int r = 0; r < schedule.ranks; ++r) {
    for (int i = 0; i < static_cast<int>(schedule.actions[r].size()); ++i) {
      const Action& a = schedule.actions[r][i];
      if (is_receive(a.type)) {
        const Action send = matching_send(a);
        TITAN_CHECK(index[send].exists(), "{}: nothing sends it: rank {} (which holds stage {}) never runs '{}'",
                    describe(schedule, r, i), schedule.stage_rank[send.stage], send.stage, action_string(send));
      } else if (is_send(a.type)) {
        const Action receive = matching_receive(a);
        TITAN_CHECK(index[receive].exists(), "{}: nothing receives it: rank {} (which holds stage {}) never runs '{}'",
                    describe(schedule, r, i), schedule.stage_rank[receive.stage], receive.stage,
                    action_string(receive));
      }
    }
  }
  for (int s = 0; s < schedule.stages; ++s) {
    const int holder = schedule.stage_rank[s];
    for (int m = 0; m < schedule.microbatches; ++m) {
      const Action f{ActionType::forward, s, m}, b{ActionType::full_backward, s, m};
      const Action in{ActionType::backward_input, s, m}, w{ActionType::backward_weight, s, m};
      TITAN_CHECK(index[f].exists(), "stage {} micro-batch {} is skipped: rank {} never runs its forward '{}'", s, m,
                  holder, action_string(f));
      const Position full = index[b], input = index[in], weight = index[w];
      TITAN_CHECK(!(full.exists() && (input.exists() || weight.exists())),
                  "{}: stage {} micro-batch {} has a full backward and also a split one ('{}' / '{}')",
                  describe(schedule, full.rank, full.index), s, m, action_string(in), action_string(w));
      TITAN_CHECK(!input.exists() || weight.exists(),
                  "{}: a backward input without its backward weight '{}': the weight gradient of stage {} "
                  "micro-batch {} is never computed",
                  describe(schedule, input.rank, input.index), action_string(w), s, m);
      TITAN_CHECK(!weight.exists() || input.exists(), "{}: a backward weight without its backward input '{}'",
                  describe(schedule, weight.rank, weight.index), action_string(in));
      const Position forward = index[f];
      TITAN_CHECK(full.exists() || input.exists(),
                  "{}: stage {} micro-batch {} has no backward (expected '{}', or '{}' and '{}')",
                  describe(schedule, forward.rank, forward.index), s, m, action_string(b), action_string(in),
                  action_string(w));
    }
  }
}

// Runs every rank's actions in order, round-robin, until no rank can move: a
// receive waits until `arrived(its matching send)`, any other action runs at
// once; `run(rank, position, action)` sees each action as it runs. Returns
// each rank's first action that did not run. The checker and the simulator
// share it, so they agree on what a schedule does.
template <typename Arrived, typename Run>
std::vector<size_t> replay(const Schedule& schedule, Arrived&& arrived, Run&& run) {
  std::vector<size_t> next(schedule.ranks, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < schedule.ranks; ++r) {
      const std::vector<Action>& actions = schedule.actions[r];
      for (; next[r] < actions.size(); ++next[r]) {
        const Action& a = actions[next[r]];
        if (is_receive(a.type) && !arrived(matching_send(a))) break;
        run(r, next[r], a);
        progress = true;
      }
    }
  }
  return next;
}

// Pass 3: the replay. Only a receive can wait; any other unmet need is an
// ordering error on its own rank, since nothing else can meet it later.
void check_replay(const Schedule& schedule, ActionIndex& index) {
  std::vector<char> done(index.size(), 0);
  const std::vector<size_t> next = replay(
      schedule, [&](const Action& send) { return done[index.slot(send)] != 0; },
      [&](int r, size_t position, const Action& a) {
        for (const std::vector<Action>& need : local_needs(schedule, r, a)) {
          const bool met =
              std::any_of(need.begin(), need.end(), [&](const Action& n) { return done[index.slot(n)] != 0; });
          if (met) continue;
          const auto later = std::find_if(need.begin(), need.end(), [&](const Action& n) { return index[n].exists(); });
          const std::string when = later != need.end() ? fmt::format("runs it later (action {})", index[*later].index)
                                                       : std::string("never runs it");
          fail("pipeline schedule '{}': {} needs {} first, but rank {} {}", schedule.name,
               describe(schedule, r, static_cast<int>(position)), quoted(need), r, when);
        }
        done[index.slot(a)] = 1;
      });
  std::vector<std::string> blocked;
  for (int r = 0; r < schedule.ranks; ++r) {
    if (next[r] == schedule.actions[r].size()) continue;
    const Action send = matching_send(schedule.actions[r][next[r]]);
    const Position from = index[send];
    const Action& stuck = schedule.actions[from.rank][next[from.rank]];
    blocked.push_back(fmt::format("{} waits for '{}' (rank {}'s action {}; rank {} is stuck at its action {} '{}')",
                                  describe(schedule, r, static_cast<int>(next[r])), action_string(send), from.rank,
                                  from.index, from.rank, next[from.rank], action_string(stuck)));
  }
  TITAN_CHECK(blocked.empty(), "pipeline schedule '{}' deadlocks: {}", schedule.name, fmt::join(blocked, "; "));
}

double cost_of(ActionType type, double forward, double input, double weight) {
  switch (type) {
    case ActionType::forward:
      return forward;
    case ActionType::full_backward:
      return input + weight;
    case ActionType::backward_input:
      return input;
    case ActionType::backward_weight:
      return weight;
    default:
      return 0;
  }
}

char letter(ActionType type) {
  switch (type) {
    case ActionType::forward:
      return 'F';
    case ActionType::full_backward:
      return 'B';
    case ActionType::backward_input:
      return 'I';
    default:
      return 'W';
  }
}

}  // namespace

void check_schedule(const Schedule& schedule) {
  TITAN_CHECK(schedule.ranks >= 1 && schedule.stages >= 1 && schedule.microbatches >= 1,
              "pipeline schedule '{}' needs at least one rank, stage and micro-batch (got {}, {}, {})", schedule.name,
              schedule.ranks, schedule.stages, schedule.microbatches);
  TITAN_CHECK(static_cast<int>(schedule.stage_rank.size()) == schedule.stages,
              "pipeline schedule '{}' places {} stages but has {}", schedule.name, schedule.stage_rank.size(),
              schedule.stages);
  TITAN_CHECK(static_cast<int>(schedule.actions.size()) == schedule.ranks,
              "pipeline schedule '{}' lists actions for {} ranks but has {}", schedule.name, schedule.actions.size(),
              schedule.ranks);
  for (int s = 0; s < schedule.stages; ++s) {
    TITAN_CHECK(schedule.stage_rank[s] >= 0 && schedule.stage_rank[s] < schedule.ranks,
                "pipeline schedule '{}' puts stage {} on rank {}, which does not exist ({} ranks)", schedule.name, s,
                schedule.stage_rank[s], schedule.ranks);
  }
  ActionIndex index(schedule);
  try {
    check_actions(schedule, index);
    check_whole(schedule, index);
  } catch (const Error& error) {
    fail("pipeline schedule '{}': {}", schedule.name, error.what());
  }
  check_replay(schedule, index);
}

Timeline simulate_schedule(const Schedule& schedule, double forward_cost, double backward_input_cost,
                           double backward_weight_cost) {
  check_schedule(schedule);
  ActionIndex index(schedule);
  std::vector<double> sent_at(index.size(), -1);
  Timeline timeline;
  timeline.start_times.resize(schedule.ranks);
  timeline.end_times.resize(schedule.ranks);
  timeline.busy.assign(schedule.ranks, 0);
  std::vector<double> clock(schedule.ranks, 0);
  // The checker proved the replay completes.
  replay(
      schedule, [&](const Action& send) { return sent_at[index.slot(send)] >= 0; },
      [&](int r, size_t, const Action& a) {
        double start = clock[r];
        if (is_receive(a.type)) start = std::max(start, sent_at[index.slot(matching_send(a))]);
        const double cost = cost_of(a.type, forward_cost, backward_input_cost, backward_weight_cost);
        timeline.start_times[r].emplace_back(start, a);
        clock[r] = start + cost;
        timeline.end_times[r].push_back(clock[r]);
        timeline.busy[r] += cost;
        if (is_send(a.type)) sent_at[index.slot(a)] = start;
      });
  timeline.makespan = *std::max_element(clock.begin(), clock.end());
  double idle = 0;
  for (int r = 0; r < schedule.ranks; ++r) {
    idle += timeline.makespan > 0 ? 1 - timeline.busy[r] / timeline.makespan : 0;
  }
  timeline.bubble_fraction = idle / schedule.ranks;
  return timeline;
}

std::string render_timeline(const Schedule& schedule, const Timeline& timeline) {
  constexpr double kEpsilon = 1e-9;
  const int columns = static_cast<int>(std::ceil(timeline.makespan - kEpsilon));
  // Labels first, to size the cells alike.
  std::vector<std::vector<std::string>> cells(schedule.ranks, std::vector<std::string>(std::max(columns, 0), "."));
  size_t width = 1;
  const int rows = std::min(schedule.ranks, static_cast<int>(timeline.start_times.size()));
  for (int r = 0; r < rows; ++r) {
    const std::vector<std::pair<double, Action>>& row = timeline.start_times[r];
    for (size_t i = 0; i < row.size(); ++i) {
      const auto& [start, a] = row[i];
      if (!is_compute(a.type)) continue;
      const double end = timeline.end_times[r][i];
      const std::string label = fmt::format("{}{}.{}", letter(a.type), a.stage, a.microbatch);
      width = std::max(width, label.size());
      // A column shows what runs at its middle, so fractional costs still
      // give each column one action.
      const int first = std::max(0, static_cast<int>(std::ceil(start - 0.5 - kEpsilon)));
      const int stop = std::min(columns, static_cast<int>(std::ceil(end - 0.5 - kEpsilon)));
      for (int c = first; c < stop; ++c) cells[r][c] = label;
    }
  }
  std::vector<std::string> heads;
  size_t head_width = 0;
  for (int r = 0; r < schedule.ranks; ++r) {
    heads.push_back(fmt::format("rank {} (stages {})", r, fmt::join(schedule.stages_of(r), ",")));
    head_width = std::max(head_width, heads.back().size());
  }
  std::string out = fmt::format("{}: {} ranks, {} stages, {} micro-batches\n", schedule.name, schedule.ranks,
                                schedule.stages, schedule.microbatches);
  for (int r = 0; r < schedule.ranks; ++r) {
    out += fmt::format("{:<{}} |", heads[r], head_width);
    for (const std::string& cell : cells[r]) out += fmt::format(" {:<{}}", cell, width);
    const double busy = r < static_cast<int>(timeline.busy.size()) ? timeline.busy[r] : 0;
    out += fmt::format(" | busy {:g}/{:g}\n", busy, timeline.makespan);
  }
  out += fmt::format("makespan {:g}, bubble {:.1f}% (mean idle share of the {} ranks)\n", timeline.makespan,
                     100 * timeline.bubble_fraction, schedule.ranks);
  return out;
}

}  // namespace titan::parallel::pipeline
