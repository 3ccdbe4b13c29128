// The schedule generators. Each one decides only the compute order on every
// rank; one shared pass then adds the sends and receives, so a hand-off is
// placed by the same rule in every schedule and the checker's model of
// communication (pipeline_schedule_check.h) matches what the generators emit.
#include "titan/parallel/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <string_view>
#include <utility>

#include "titan/core/error.h"

namespace titan::parallel::pipeline {

namespace {

constexpr std::array<std::pair<ActionType, std::string_view>, 8> kTypeNames = {{
    {ActionType::forward, "F"},
    {ActionType::full_backward, "B"},
    {ActionType::backward_input, "I"},
    {ActionType::backward_weight, "W"},
    {ActionType::send_forward, "SEND_F"},
    {ActionType::recv_forward, "RECV_F"},
    {ActionType::send_backward, "SEND_B"},
    {ActionType::recv_backward, "RECV_B"},
}};

constexpr std::string_view kNotation =
    "<stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><micro-batch>, e.g. '0F3' or '2SEND_B1'";

std::string_view type_name(ActionType type) {
  for (const auto& [candidate, name] : kTypeNames) {
    if (candidate == type) return name;
  }
  return "?";
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Where each schedule puts its stages.
enum class Placement { one_per_rank, looped, v_shape };

Placement placement_of(const std::string& name) {
  if (name == "GPipe" || name == "1F1B") return Placement::one_per_rank;
  if (name == "ZBVZeroBubble") return Placement::v_shape;
  return Placement::looped;
}

std::vector<int> place_stages(Placement placement, int ranks, int stages) {
  std::vector<int> stage_rank(stages);
  for (int s = 0; s < stages; ++s) {
    switch (placement) {
      case Placement::one_per_rank:
        stage_rank[s] = s;
        break;
      case Placement::looped:
        stage_rank[s] = s % ranks;
        break;
      case Placement::v_shape:
        stage_rank[s] = s < ranks ? s : 2 * ranks - 1 - s;
        break;
    }
  }
  return stage_rank;
}

using Order = std::vector<std::vector<Action>>;  // compute actions per rank

Action forward(int stage, int microbatch) { return {ActionType::forward, stage, microbatch}; }
Action full_backward(int stage, int microbatch) { return {ActionType::full_backward, stage, microbatch}; }

// GPipe: every forward, then every backward; the simplest order and the one
// with the most activations alive at once.
Order gpipe_order(int ranks, int microbatches) {
  Order order(ranks);
  for (int r = 0; r < ranks; ++r) {
    for (int m = 0; m < microbatches; ++m) order[r].push_back(forward(r, m));
    for (int m = 0; m < microbatches; ++m) order[r].push_back(full_backward(r, m));
  }
  return order;
}

// 1F1B: rank r runs ranks-r-1 forwards ahead (enough for the last rank to start
// its first backward as soon as it can), then alternates one forward and one
// backward, then drains the backwards. Same bubble as GPipe, but at most
// ranks-r micro-batches of activations alive on rank r.
Order one_f_one_b_order(int ranks, int microbatches) {
  Order order(ranks);
  for (int r = 0; r < ranks; ++r) {
    const int warmup = std::min(ranks - r - 1, microbatches);
    for (int m = 0; m < warmup; ++m) order[r].push_back(forward(r, m));
    for (int m = 0; m < microbatches - warmup; ++m) {
      order[r].push_back(forward(r, warmup + m));
      order[r].push_back(full_backward(r, m));
    }
    for (int m = microbatches - warmup; m < microbatches; ++m) order[r].push_back(full_backward(r, m));
  }
  return order;
}

// Interleaved 1F1B (Narayanan et al. 2021, as Megatron-LM and PyTorch run it).
// Rank r holds the chunks r, r+ranks, ...; it walks its chunks in rounds of
// `group` micro-batches (the forward k-th in its order is chunk (k/group)%v,
// the backwards walk the chunks in reverse), and runs (v-1)*group +
// 2*(ranks-r-1) forwards ahead before it alternates. group = ranks when the
// micro-batch count is a multiple of ranks; PyTorch's rule for other counts is
// microbatches / max(1, microbatches / ranks), which must divide evenly.
Order interleaved_1f1b_order(int ranks, int stages, int microbatches, int group) {
  const int chunks = stages / ranks;
  const int total = chunks * microbatches;
  Order order(ranks);
  for (int r = 0; r < ranks; ++r) {
    const auto microbatch_of = [&](int k) { return (k / (group * chunks)) * group + k % group; };
    const auto forward_k = [&](int k) { return forward(((k / group) % chunks) * ranks + r, microbatch_of(k)); };
    const auto backward_k = [&](int k) {
      return full_backward((chunks - 1 - (k / group) % chunks) * ranks + r, microbatch_of(k));
    };
    const int warmup = std::min((chunks - 1) * group + 2 * (ranks - r - 1), total);
    for (int k = 0; k < warmup; ++k) order[r].push_back(forward_k(k));
    for (int k = 0; k < total - warmup; ++k) {
      order[r].push_back(forward_k(warmup + k));
      order[r].push_back(backward_k(k));
    }
    for (int k = total - warmup; k < total; ++k) order[r].push_back(backward_k(k));
  }
  return order;
}

// The zero-bubble schedules come from a list scheduler over unit time slots
// (F, I and W cost one slot each; communication is free; cross-rank
// dependencies are respected). In every slot an idle rank picks, in this order:
//   1. an I whose inputs are ready (earliest ready first): the critical path
//      runs through the input gradients, so they never wait;
//   2. an F, unless it would admit a new micro-batch onto a rank that already
//      holds `admit_limit` of them (the activation-memory cap; a micro-batch is
//      held from the forward of its first stage on the rank to that stage's W,
//      when the last of its saved activations are freed: so each stage holds
//      at most `admit_limit` micro-batches' activations, which for ZB-V's
//      half-size stages is 1F1B's peak, as in the paper); deeper stages first,
//      so that micro-batches reach the loss early;
//   3. the first stage's backward, whole (a B of two slots): its input is
//      token ids, so it has no input gradient and is all weight work (split,
//      its I would take no time and its W two slots, not the one each the
//      schedule counts); else a W, oldest first: weight gradients have no
//      consumer until the optimizer step, which is what lets them fill what
//      would be bubbles;
//   4. nothing.
// Qi et al. ("Zero Bubble Pipeline Parallelism", 2023) build ZB-H1 and ZB-V by
// hand-placing W into the same holes; the greedy rule gives the same kind of shape.
Order zero_bubble_order(const std::vector<int>& stage_rank, int ranks, int microbatches, int admit_limit) {
  const int stages = static_cast<int>(stage_rank.size());
  constexpr int kNever = std::numeric_limits<int>::max();
  const auto at = [&](int s, int m) { return static_cast<size_t>(s) * microbatches + m; };
  const size_t cells = static_cast<size_t>(stages) * microbatches;
  // The slot at whose start each action's result exists (kNever: not scheduled).
  std::vector<int> forward_done(cells, kNever), input_done(cells, kNever), weight_done(cells, kNever);

  std::vector<std::vector<int>> held(ranks);
  for (int s = 0; s < stages; ++s) held[stage_rank[s]].push_back(s);
  std::vector<int> busy_until(ranks, 0), admitted(ranks, 0);
  std::vector<std::vector<std::pair<int, int>>> weights_pending(ranks);  // (stage, microbatch) in I order
  Order order(ranks);
  size_t remaining = 3 * cells;

  for (int t = 0; remaining > 0; ++t) {
    bool scheduled = false;
    for (int r = 0; r < ranks; ++r) {
      if (busy_until[r] > t || held[r].empty()) continue;
      const int entry_stage = held[r].front();
      // 1. The earliest-ready input gradient (the first stage has none: its whole backward is filler, see 3).
      int best_stage = -1, best_microbatch = -1, best_ready = kNever;
      for (int s : held[r]) {
        if (s == 0) continue;
        for (int m = 0; m < microbatches; ++m) {
          if (input_done[at(s, m)] != kNever || forward_done[at(s, m)] > t) continue;
          const int upstream = s + 1 < stages ? input_done[at(s + 1, m)] : 0;
          if (upstream > t) continue;
          const int ready = std::max(forward_done[at(s, m)], upstream);
          if (ready < best_ready || (ready == best_ready && m < best_microbatch)) {
            best_stage = s, best_microbatch = m, best_ready = ready;
          }
        }
      }
      if (best_stage >= 0) {
        input_done[at(best_stage, best_microbatch)] = t + 1;
        weights_pending[r].emplace_back(best_stage, best_microbatch);
        order[r].push_back({ActionType::backward_input, best_stage, best_microbatch});
      } else {
        // 2. A forward: the deepest ready stage, its smallest micro-batch.
        for (auto s = held[r].rbegin(); s != held[r].rend() && best_stage < 0; ++s) {
          if (*s == entry_stage && admitted[r] >= admit_limit) continue;
          for (int m = 0; m < microbatches; ++m) {
            if (forward_done[at(*s, m)] != kNever) continue;
            if (*s > 0 && forward_done[at(*s - 1, m)] > t) continue;
            best_stage = *s, best_microbatch = m;
            break;
          }
        }
        // 3a. The first stage's backward, whole (B, two slots) for the
        // earliest ready micro-batch: its input is token ids, so there is no
        // input gradient to hurry, and all of it is weight work.
        // It and the oldest W go in the order they became ready.
        int first_stage_microbatch = -1;
        if (best_stage < 0 && held[r].front() == 0) {
          for (int m = 0; m < microbatches && first_stage_microbatch < 0; ++m) {
            const int ready = std::max(forward_done[at(0, m)], stages == 1 ? 0 : input_done[at(1, m)]);
            if (input_done[at(0, m)] == kNever && ready <= t) first_stage_microbatch = m;
          }
          if (first_stage_microbatch >= 0 && !weights_pending[r].empty()) {
            const auto [s, m] = weights_pending[r].front();
            const int weight_ready = input_done[at(s, m)];
            const int first_ready =
                stages == 1 ? forward_done[at(0, first_stage_microbatch)] : input_done[at(1, first_stage_microbatch)];
            if (weight_ready <= first_ready) first_stage_microbatch = -1;
          }
        }
        if (best_stage >= 0) {
          forward_done[at(best_stage, best_microbatch)] = t + 1;
          order[r].push_back(forward(best_stage, best_microbatch));
          if (best_stage == entry_stage) ++admitted[r];
        } else if (first_stage_microbatch >= 0) {
          input_done[at(0, first_stage_microbatch)] = weight_done[at(0, first_stage_microbatch)] = t + 2;
          order[r].push_back({ActionType::full_backward, 0, first_stage_microbatch});
          --admitted[r];  // stage 0 is this rank's entry stage
          busy_until[r] = t + 2;
          remaining -= 2;
          scheduled = true;
          continue;
        } else if (!weights_pending[r].empty() &&
                   input_done[at(weights_pending[r].front().first, weights_pending[r].front().second)] <= t) {
          // 3. The oldest weight gradient.
          const auto [s, m] = weights_pending[r].front();
          weights_pending[r].erase(weights_pending[r].begin());
          weight_done[at(s, m)] = t + 1;
          order[r].push_back({ActionType::backward_weight, s, m});
          if (s == entry_stage) --admitted[r];
        } else {
          continue;  // 4. idle
        }
      }
      busy_until[r] = t + 1;
      --remaining;
      scheduled = true;
    }
    // Nothing started and nothing running: nothing can change any more.
    TITAN_CHECK(scheduled || *std::max_element(busy_until.begin(), busy_until.end()) > t,
                "internal error: the zero-bubble list scheduler stalled at slot {} (admit limit {})", t, admit_limit);
  }
  return order;
}

bool is_backward(ActionType type) { return type == ActionType::full_backward || type == ActionType::backward_input; }

std::string known_names() { return fmt::format("{}", fmt::join(schedule_names(), ", ")); }

}  // namespace

bool is_compute(ActionType type) {
  return type == ActionType::forward || type == ActionType::full_backward || type == ActionType::backward_input ||
         type == ActionType::backward_weight;
}

Schedule with_communication(std::string name, int ranks, int microbatches, std::vector<int> stage_rank,
                            const std::vector<std::vector<Action>>& order) {
  Schedule schedule;
  schedule.name = std::move(name);
  schedule.ranks = ranks;
  schedule.stages = static_cast<int>(stage_rank.size());
  schedule.microbatches = microbatches;
  schedule.stage_rank = std::move(stage_rank);
  schedule.actions.resize(ranks);
  const int last = schedule.stages - 1;
  const auto remote = [&](int r, int s) { return s >= 0 && s <= last && schedule.stage_rank[s] != r; };
  for (int r = 0; r < ranks; ++r) {
    std::vector<Action>& out = schedule.actions[r];
    for (const Action& a : order[r]) {
      if (a.type == ActionType::forward && remote(r, a.stage - 1)) {
        out.push_back({ActionType::recv_forward, a.stage, a.microbatch});
      }
      if (is_backward(a.type) && remote(r, a.stage + 1)) {
        out.push_back({ActionType::recv_backward, a.stage, a.microbatch});
      }
      out.push_back(a);
      if (a.type == ActionType::forward && remote(r, a.stage + 1)) {
        out.push_back({ActionType::send_forward, a.stage, a.microbatch});
      }
      if (is_backward(a.type) && remote(r, a.stage - 1)) {
        out.push_back({ActionType::send_backward, a.stage, a.microbatch});
      }
    }
  }
  return schedule;
}

std::vector<int> Schedule::stages_of(int rank) const {
  std::vector<int> stages_held;
  for (int s = 0; s < static_cast<int>(stage_rank.size()); ++s) {
    if (stage_rank[s] == rank) stages_held.push_back(s);
  }
  return stages_held;
}

std::string action_string(const Action& action) {
  return fmt::format("{}{}{}", action.stage, type_name(action.type), action.microbatch);
}

Action parse_action(const std::string& text) {
  // <digits><type><digits>: the type holds no digit, so both numbers are the
  // maximal digit runs at either end.
  size_t head = 0;
  while (head < text.size() && is_digit(text[head])) ++head;
  size_t tail = text.size();
  while (tail > head && is_digit(text[tail - 1])) --tail;
  const std::string_view type_text = std::string_view(text).substr(head, tail - head);
  const auto type =
      std::find_if(kTypeNames.begin(), kTypeNames.end(), [&](const auto& entry) { return entry.second == type_text; });
  TITAN_CHECK(head > 0 && tail < text.size() && type != kTypeNames.end(), "'{}' is not an action (expected {})", text,
              kNotation);
  Action action{type->first, 0, 0};
  const auto number = [&](size_t begin, size_t end, int& value) {
    const auto [end_ptr, error] = std::from_chars(text.data() + begin, text.data() + end, value);
    TITAN_CHECK(error == std::errc() && end_ptr == text.data() + end, "'{}' is not an action: {} is out of range", text,
                text.substr(begin, end - begin));
  };
  number(0, head, action.stage);
  number(tail, text.size(), action.microbatch);
  return action;
}

void check_schedule_size(int64_t stages, int64_t microbatches, const std::string& where) {
  TITAN_CHECK(stages >= 1 && stages <= 1024 && microbatches >= 1 && microbatches <= 65536 &&
                  stages * microbatches <= (int64_t{1} << 20),
              "{}: {} stages x {} micro-batches is outside what a pipeline schedule may hold (1-1024 stages, "
              "1-65536 micro-batches, 2^20 of both)",
              where, stages, microbatches);
}

std::vector<std::string> schedule_names() {
  return {"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "ZBVZeroBubble"};
}

int stages_per_rank(const std::string& name) {
  const std::vector<std::string> names = schedule_names();
  TITAN_CHECK(std::find(names.begin(), names.end(), name) != names.end(),
              "parallelism.pipeline_parallel_schedule: unknown schedule '{}' (known: {})", name, known_names());
  return placement_of(name) == Placement::one_per_rank ? 1 : 2;
}

Schedule generate_schedule(const std::string& name, int ranks, int stages, int microbatches) {
  const int default_per_rank = stages_per_rank(name);  // checks the name
  TITAN_CHECK(ranks >= 1, "parallelism.pipeline_parallel_degree must be at least 1 for a pipeline schedule, got {}",
              ranks);
  TITAN_CHECK(microbatches >= 1,
              "a pipeline step needs at least 1 micro-batch, got {} (the local batch size divided by "
              "parallelism.pipeline_parallel_microbatch_size)",
              microbatches);
  check_schedule_size(std::max(stages, 1), microbatches, "parallelism.pipeline_parallel_schedule " + name);
  const Placement placement = placement_of(name);
  switch (placement) {
    case Placement::one_per_rank:
      TITAN_CHECK(stages == ranks,
                  "parallelism.pipeline_parallel_schedule '{}' runs one stage per rank: with "
                  "parallelism.pipeline_parallel_degree {} it needs {} stages, got {} (use Interleaved1F1B or "
                  "ZBVZeroBubble for several stages per rank)",
                  name, ranks, ranks, stages);
      break;
    case Placement::v_shape:
      TITAN_CHECK(stages == 2 * ranks,
                  "parallelism.pipeline_parallel_schedule '{}' places exactly 2 stages on each rank (a V): with "
                  "parallelism.pipeline_parallel_degree {} it needs {} stages, got {}",
                  name, ranks, 2 * ranks, stages);
      break;
    case Placement::looped:
      TITAN_CHECK(stages >= ranks && stages % ranks == 0,
                  "parallelism.pipeline_parallel_schedule '{}' loops stages over the ranks (stage s on rank s % {}): "
                  "the number of stages must be a positive multiple of parallelism.pipeline_parallel_degree {} "
                  "(e.g. {}), got {}",
                  name, ranks, ranks, ranks * default_per_rank, stages);
      break;
  }
  std::vector<int> stage_rank = place_stages(placement, ranks, stages);
  Order order;
  if (name == "GPipe") {
    order = gpipe_order(ranks, microbatches);
  } else if (name == "1F1B") {
    order = one_f_one_b_order(ranks, microbatches);
  } else if (name == "Interleaved1F1B") {
    const int rounds = std::max(1, microbatches / ranks);
    TITAN_CHECK(microbatches % rounds == 0,
                "parallelism.pipeline_parallel_schedule 'Interleaved1F1B' runs micro-batches in rounds of equal size: "
                "{} micro-batches do not split into {} rounds (max(1, micro-batches / "
                "parallelism.pipeline_parallel_degree {})); use a multiple of {} micro-batches (the local batch size "
                "divided by parallelism.pipeline_parallel_microbatch_size)",
                microbatches, rounds, ranks, ranks);
    order = interleaved_1f1b_order(ranks, stages, microbatches, microbatches / rounds);
  } else {
    // The activation cap, in micro-batches held per rank: 1F1B's on its first
    // rank (ranks micro-batches of all of the rank's layers), which is also
    // what Qi et al. give ZB-H1 and ZB-V.
    order = zero_bubble_order(stage_rank, ranks, microbatches, ranks);
  }
  return with_communication(name, ranks, microbatches, std::move(stage_rank), order);
}

}  // namespace titan::parallel::pipeline
