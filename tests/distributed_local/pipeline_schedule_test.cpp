// Pipeline schedules as data: every generator's schedules pass the checker and
// run each micro-batch of each stage exactly once forward and once backward;
// the simulated bubbles match the closed forms (GPipe, 1F1B) and the papers'
// claims (interleaving and zero-bubble shrink it); the action notation and the
// CSV layout round-trip; and broken schedules are refused with messages that
// point at the rank and the action.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include "support/expect_error.h"
#include "titan/parallel/pipeline_schedule.h"
#include "titan/parallel/pipeline_schedule_check.h"
#include "titan/parallel/pipeline_schedule_csv.h"

namespace titan::parallel::pipeline {
namespace pipeline_schedule_test {

namespace fs = std::filesystem;
using titan::testing::expect_error;

int default_stages(const std::string& name, int ranks) { return ranks * stages_per_rank(name); }

Schedule generated(const std::string& name, int ranks, int microbatches) {
  return generate_schedule(name, ranks, default_stages(name, ranks), microbatches);
}

// The micro-batch counts to try: multiples of the ranks, and the
// non-multiples a schedule accepts (Interleaved1F1B needs equal rounds).
std::vector<int> microbatch_counts(const std::string& name, int ranks) {
  std::vector<int> counts = {ranks, 2 * ranks, 3 * ranks};
  for (int m : {1, ranks + 1, 2 * ranks + 1, 5}) {
    const int rounds = std::max(1, m / ranks);
    if (name != "Interleaved1F1B" || m % rounds == 0) counts.push_back(m);
  }
  return counts;
}

fs::path temp_file(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "pipeline_schedule_test";
  fs::create_directories(dir);
  return dir / name;
}

fs::path write_file(const std::string& name, const std::string& text) {
  const fs::path path = temp_file(name);
  std::ofstream(path) << text;
  return path;
}

// Checks the CSV `text` and expects the refusal to hold `fragments`.
void expect_refused(const std::string& file, const std::string& text, const std::vector<std::string>& fragments) {
  const fs::path path = write_file(file, text);
  expect_error([&] { check_schedule(read_schedule_csv(path.string(), 0, 0)); }, fragments);
}

TEST(PipelineSchedule, EveryGeneratorPassesTheCheckerAndRunsEachMicrobatchOnce) {
  for (const std::string& name : schedule_names()) {
    for (int ranks = 1; ranks <= 8; ++ranks) {
      for (int microbatches : microbatch_counts(name, ranks)) {
        SCOPED_TRACE(fmt::format("{} ranks {} micro-batches {}", name, ranks, microbatches));
        const Schedule schedule = generated(name, ranks, microbatches);
        ASSERT_NO_THROW(check_schedule(schedule));
        EXPECT_EQ(schedule.ranks, ranks);
        EXPECT_EQ(schedule.stages, default_stages(name, ranks));
        // Counted here independently of the checker: (type, stage, mb) -> ranks running it.
        std::map<std::tuple<ActionType, int, int>, std::vector<int>> runs;
        for (int r = 0; r < ranks; ++r) {
          for (const Action& a : schedule.actions[r]) runs[std::tuple(a.type, a.stage, a.microbatch)].push_back(r);
        }
        const auto ranks_running = [&](ActionType type, int s, int m) { return runs[std::tuple(type, s, m)]; };
        const bool split = name == "InterleavedZeroBubble" || name == "ZBVZeroBubble";
        for (int s = 0; s < schedule.stages; ++s) {
          const std::vector<int> here = {schedule.stage_rank[s]};
          for (int m = 0; m < microbatches; ++m) {
            EXPECT_EQ(ranks_running(ActionType::forward, s, m), here) << s << " " << m;
            // The zero-bubble schedules split every backward but the first
            // stage's, which has no input gradient (all of it is weight work).
            if (split && s > 0) {
              EXPECT_EQ(ranks_running(ActionType::backward_input, s, m), here) << s << " " << m;
              EXPECT_EQ(ranks_running(ActionType::backward_weight, s, m), here) << s << " " << m;
              EXPECT_TRUE(ranks_running(ActionType::full_backward, s, m).empty());
            } else {
              EXPECT_EQ(ranks_running(ActionType::full_backward, s, m), here) << s << " " << m;
              EXPECT_TRUE(ranks_running(ActionType::backward_input, s, m).empty());
            }
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, PlacementFollowsTheSchedule) {
  EXPECT_EQ(generated("1F1B", 4, 8).stage_rank, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(generated("Interleaved1F1B", 4, 8).stage_rank, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  const Schedule v = generated("ZBVZeroBubble", 4, 8);
  EXPECT_EQ(v.stage_rank, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(v.stages_of(1), (std::vector<int>{1, 6}));
  // The V's turn (stages 3 -> 4 on rank 3) is a local hand-off: no send, no receive.
  for (const Action& a : v.actions[3]) {
    const bool crosses_turn =
        (a.type == ActionType::send_forward && a.stage == 3) || (a.type == ActionType::recv_forward && a.stage == 4) ||
        (a.type == ActionType::send_backward && a.stage == 4) || (a.type == ActionType::recv_backward && a.stage == 3);
    EXPECT_FALSE(crosses_turn) << action_string(a);
  }
  // Three stages per rank, looped.
  const Schedule three = generate_schedule("Interleaved1F1B", 2, 6, 4);
  EXPECT_EQ(three.stages_of(0), (std::vector<int>{0, 2, 4}));
  EXPECT_NO_THROW(check_schedule(three));
}

TEST(PipelineSchedule, OneFOneBWarmsUpRanksMinusRankForwards) {
  const Schedule schedule = generated("1F1B", 4, 8);
  for (int r = 0; r < 4; ++r) {
    int leading_forwards = 0;
    for (const Action& a : schedule.actions[r]) {
      if (a.type == ActionType::full_backward) break;
      if (a.type == ActionType::forward) ++leading_forwards;
    }
    // The warm-up, plus the steady state's first forward.
    EXPECT_EQ(leading_forwards, 4 - r - 1 + 1) << "rank " << r;
  }
}

TEST(PipelineSchedule, GPipeAndOneFOneBBubbleIsTheClosedForm) {
  for (const std::string name : {"GPipe", "1F1B"}) {
    for (int ranks = 1; ranks <= 8; ++ranks) {
      for (int microbatches : {1, ranks, ranks + 1, 2 * ranks, 3 * ranks}) {
        // F = 1, B = I + W = 2.
        const Timeline timeline = simulate_schedule(generated(name, ranks, microbatches));
        const double expected = static_cast<double>(ranks - 1) / (microbatches + ranks - 1);
        EXPECT_NEAR(timeline.bubble_fraction, expected, 1e-12) << name << " " << ranks << " " << microbatches;
        EXPECT_DOUBLE_EQ(timeline.makespan, 3.0 * (microbatches + ranks - 1));
      }
    }
  }
}

TEST(PipelineSchedule, InterleavingAndZeroBubbleShrinkTheBubble) {
  const double one_f_one_b = simulate_schedule(generated("1F1B", 4, 8)).bubble_fraction;
  EXPECT_NEAR(one_f_one_b, 3.0 / 11.0, 1e-12);
  const double interleaved = simulate_schedule(generated("Interleaved1F1B", 4, 8)).bubble_fraction;
  const double interleaved_zb = simulate_schedule(generated("InterleavedZeroBubble", 4, 8)).bubble_fraction;
  const double zbv = simulate_schedule(generated("ZBVZeroBubble", 4, 8)).bubble_fraction;
  EXPECT_LT(interleaved, one_f_one_b);
  EXPECT_LT(interleaved_zb, interleaved);
  EXPECT_LE(zbv, one_f_one_b / 2);
  for (int ranks = 2; ranks <= 8; ++ranks) {
    for (int microbatches : {ranks, 2 * ranks, 3 * ranks}) {
      const double base = simulate_schedule(generated("1F1B", ranks, microbatches)).bubble_fraction;
      EXPECT_LT(simulate_schedule(generated("Interleaved1F1B", ranks, microbatches)).bubble_fraction, base);
      EXPECT_LT(simulate_schedule(generated("ZBVZeroBubble", ranks, microbatches)).bubble_fraction, base);
    }
  }
}

// The most (stage, micro-batch) activations a rank holds at once: from a
// forward until its full or weight backward frees them.
int peak_held(const Schedule& schedule, int rank) {
  int held = 0, peak = 0;
  for (const Action& a : schedule.actions[static_cast<size_t>(rank)]) {
    if (a.type == ActionType::forward) peak = std::max(peak, ++held);
    if (a.type == ActionType::full_backward || a.type == ActionType::backward_weight) --held;
  }
  return peak;
}

// Deferring weight gradients must not pile up activations: ZB-V's stages are
// half of 1F1B's, so holding 2p of them is 1F1B's peak of p whole stages (as
// in the paper); the interleaved zero-bubble schedule holds no more than
// Interleaved1F1B.
TEST(PipelineSchedule, ZeroBubbleSchedulesKeepOneFOneBsActivationMemory) {
  for (int ranks : {2, 4, 8}) {
    const int microbatches = 2 * ranks;
    const Schedule one_f_one_b = generate_schedule("1F1B", ranks, ranks, microbatches);
    const Schedule zbv = generate_schedule("ZBVZeroBubble", ranks, 2 * ranks, microbatches);
    const Schedule interleaved = generate_schedule("Interleaved1F1B", ranks, 2 * ranks, microbatches);
    const Schedule interleaved_zb = generate_schedule("InterleavedZeroBubble", ranks, 2 * ranks, microbatches);
    for (int r = 0; r < ranks; ++r) {
      EXPECT_LE(peak_held(zbv, r), 2 * peak_held(one_f_one_b, 0)) << ranks << " ranks, rank " << r;
      EXPECT_LE(peak_held(interleaved_zb, r), peak_held(interleaved, 0)) << ranks << " ranks, rank " << r;
    }
  }
}

TEST(PipelineSchedule, SimulationCountsBusyTimeWithTheGivenCosts) {
  const Schedule schedule = generated("1F1B", 2, 4);
  const Timeline timeline = simulate_schedule(schedule, 1, 2, 3);  // B = 5
  for (int r = 0; r < 2; ++r) EXPECT_DOUBLE_EQ(timeline.busy[r], 4 * (1 + 5));
  // Two ranks: the pipeline fills and drains once, (F + B) of idle each.
  EXPECT_DOUBLE_EQ(timeline.makespan, 4 * 6 + 6);
  ASSERT_EQ(timeline.start_times[1].size(), schedule.actions[1].size());
  EXPECT_EQ(timeline.start_times[1][0].second, schedule.actions[1][0]);
}

TEST(PipelineSchedule, RendersOneLinePerRankAndTheBubble) {
  const Schedule schedule = generated("ZBVZeroBubble", 4, 8);
  const std::string text = render_timeline(schedule, simulate_schedule(schedule));
  EXPECT_NE(text.find("rank 0 (stages 0,7)"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 3 (stages 3,4)"), std::string::npos) << text;
  EXPECT_NE(text.find("F0.3"), std::string::npos) << text;
  EXPECT_NE(text.find("W7.7"), std::string::npos) << text;
  EXPECT_NE(text.find("bubble"), std::string::npos) << text;
  EXPECT_NE(text.find('%'), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1 + 4 + 1);
}

TEST(PipelineAction, StringRoundTrip) {
  const std::vector<std::pair<Action, std::string>> cases = {
      {{ActionType::forward, 0, 3}, "0F3"},
      {{ActionType::full_backward, 1, 0}, "1B0"},
      {{ActionType::backward_input, 1, 0}, "1I0"},
      {{ActionType::backward_weight, 7, 12}, "7W12"},
      {{ActionType::send_forward, 2, 5}, "2SEND_F5"},
      {{ActionType::recv_forward, 3, 5}, "3RECV_F5"},
      {{ActionType::send_backward, 12, 34}, "12SEND_B34"},
      {{ActionType::recv_backward, 0, 0}, "0RECV_B0"},
  };
  for (const auto& [action, text] : cases) {
    EXPECT_EQ(action_string(action), text);
    EXPECT_EQ(parse_action(text), action) << text;
  }
}

TEST(PipelineAction, BadStringsAreRefused) {
  for (const std::string bad : {"", "F3", "0F", "0X3", "0f3", "0F3x", "-1F0", "0SEND3", "0 F3", "0FF3"}) {
    expect_error([&] { parse_action(bad); }, {"'" + bad + "' is not an action", "SEND_F"});
  }
  expect_error([] { parse_action("99999999999F0"); }, {"out of range"});
}

TEST(PipelineSchedule, ImpossibleRequestsNameTheKey) {
  expect_error([] { generate_schedule("Looped", 4, 4, 8); },
               {"parallelism.pipeline_parallel_schedule", "'Looped'", "GPipe", "ZBVZeroBubble"});
  expect_error([] { generate_schedule("ZBVZeroBubble", 4, 4, 8); },
               {"parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_degree", "8 stages"});
  expect_error([] { generate_schedule("1F1B", 4, 8, 8); }, {"parallelism.pipeline_parallel_degree", "4 stages"});
  expect_error([] { generate_schedule("Interleaved1F1B", 4, 6, 8); },
               {"parallelism.pipeline_parallel_degree", "multiple"});
  expect_error([] { generate_schedule("Interleaved1F1B", 4, 8, 9); },
               {"parallelism.pipeline_parallel_microbatch_size", "9 micro-batches"});
  expect_error([] { generate_schedule("1F1B", 4, 4, 0); }, {"parallelism.pipeline_parallel_microbatch_size"});
  expect_error([] { generate_schedule("GPipe", 0, 0, 4); }, {"parallelism.pipeline_parallel_degree"});
}

TEST(PipelineScheduleCsv, RoundTrip) {
  for (const std::string& name : schedule_names()) {
    const Schedule schedule = generated(name, 4, 8);
    const fs::path path = write_file(name + ".csv", schedule_csv(schedule));
    for (const auto& [stages, microbatches] : {std::pair{schedule.stages, 8}, std::pair{0, 0}}) {
      const Schedule read = read_schedule_csv(path.string(), stages, microbatches);
      EXPECT_EQ(read.ranks, schedule.ranks) << name;
      EXPECT_EQ(read.stages, schedule.stages) << name;
      EXPECT_EQ(read.microbatches, schedule.microbatches) << name;
      EXPECT_EQ(read.stage_rank, schedule.stage_rank) << name;
      EXPECT_EQ(read.actions, schedule.actions) << name;
      EXPECT_NO_THROW(check_schedule(read)) << name;
    }
  }
}

TEST(PipelineScheduleCsv, EmptyCellsAndSpacesAreSkipped) {
  const fs::path path = write_file("gaps.csv", "0F0, 0SEND_F0,,,0RECV_B0,0B0\r\n,1RECV_F0,1F0,1B0,1SEND_B0,\n\n");
  const Schedule read = read_schedule_csv(path.string(), 2, 1);
  EXPECT_EQ(read.ranks, 2);
  EXPECT_EQ(read.actions[0].size(), 4u);
  EXPECT_EQ(read.actions[1].front(), (Action{ActionType::recv_forward, 1, 0}));
  EXPECT_NO_THROW(check_schedule(read));
}

// 1F1B on two ranks with two micro-batches, as the generator writes it.
const std::string kRank0 = "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n";
const std::string kRank1 = "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n";

TEST(PipelineScheduleCsv, TheHandWrittenBaseIsSound) {
  EXPECT_EQ(schedule_csv(generated("1F1B", 2, 2)), kRank0 + kRank1);
  const fs::path path = write_file("base.csv", kRank0 + kRank1);
  EXPECT_NO_THROW(check_schedule(read_schedule_csv(path.string(), 2, 2)));
}

TEST(PipelineScheduleCsv, MissingBackwardIsRefused) {
  expect_refused("missing_backward.csv", kRank0 + "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1SEND_B1\n",
                 {"rank 1, action 5 '1F1'", "no backward", "'1B1'"});
}

TEST(PipelineScheduleCsv, ReceiveWithoutSendIsRefused) {
  expect_refused("no_send.csv", "0F0,0SEND_F0,0F1,0RECV_B0,0B0,0RECV_B1,0B1\n" + kRank1,
                 {"rank 1, action 4 '1RECV_F1'", "nothing sends it", "'0SEND_F1'"});
}

TEST(PipelineScheduleCsv, SendWithoutReceiveIsRefused) {
  expect_refused("no_receive.csv", kRank0 + "1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n",
                 {"rank 0, action 3 '0SEND_F1'", "nothing receives it", "'1RECV_F1'"});
}

TEST(PipelineScheduleCsv, CycleIsADeadlock) {
  // Each rank first receives from the other.
  expect_refused("cycle.csv", "0RECV_B0,0F0,0SEND_F0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
                 {"deadlocks", "rank 0, action 0 '0RECV_B0' waits for '1SEND_B0'",
                  "rank 1, action 0 '1RECV_F0' waits for '0SEND_F0'"});
}

TEST(PipelineScheduleCsv, ForwardOfAStageTheRankDoesNotHoldIsRefused) {
  // Rank 0 runs most of stage 0's forwards, so stage 0 is rank 0's.
  expect_refused("wrong_stage.csv",
                 "0F0,0SEND_F0,0RECV_B0,0B0,0F1,0SEND_F1,0RECV_B1,0B1\n"
                 "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,0F2\n",
                 {"rank 1, action 8 '0F2'", "rank 1 does not hold", "stage 0 is on rank 0"});
}

// Indices far beyond any real pipeline are refused before anything is sized by them.
TEST(PipelineScheduleCsv, HugeIndicesAreRefused) {
  expect_error([] { parse_schedule_csv("0F2147483647\n", "huge.csv", 0, 0); },
               {"huge.csv", "outside what a pipeline schedule may hold"});
  expect_error([] { parse_schedule_csv("5000F0\n", "huge.csv", 0, 0); }, {"5001 stages"});
  expect_error([] { parse_schedule_csv("0F99999999999\n", "huge.csv", 0, 0); }, {"out of range"});
}

// TorchTitan's tests/assets/custom_schedule.csv, built here from its shape:
// 2 ranks, rank r holding stages r and r + 2, 8 micro-batches, every forward
// first, then the backwards split in input and weight halves, two micro-batches
// of the later stage, then two of the earlier. Compute actions only: the
// sends and receives are added as PyTorch's lowering adds them.
TEST(PipelineScheduleCsv, TorchTitansComputeOnlyScheduleIsLowered) {
  std::string text;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> cells;
    for (int stage : {rank, rank + 2}) {
      for (int m = 0; m < 8; ++m) cells.push_back(fmt::format("{}F{}", stage, m));
    }
    for (int pair = 0; pair < 4; ++pair) {
      for (int stage : {rank + 2, rank}) {
        for (int m = 2 * pair; m < 2 * pair + 2; ++m) {
          cells.push_back(fmt::format("{}I{}", stage, m));
          cells.push_back(fmt::format("{}W{}", stage, m));
        }
      }
    }
    text += fmt::format("{}\n", fmt::join(cells, ","));
  }
  const Schedule read = parse_schedule_csv(text, "custom_schedule.csv", 0, 0);
  EXPECT_EQ(read.ranks, 2);
  EXPECT_EQ(read.stages, 4);
  EXPECT_EQ(read.microbatches, 8);
  EXPECT_EQ(read.stage_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_NO_THROW(check_schedule(read));
  // Stage 2's first forward on rank 0 waits for stage 1's output from rank 1, which sends it after computing it.
  const std::vector<Action>& rank0 = read.actions[0];
  const auto at = [&](const std::vector<Action>& row, Action a) { return std::find(row.begin(), row.end(), a); };
  const auto forward = at(rank0, {ActionType::forward, 2, 0});
  ASSERT_NE(forward, rank0.end());
  EXPECT_EQ(*(forward - 1), (Action{ActionType::recv_forward, 2, 0}));
  const std::vector<Action>& rank1 = read.actions[1];
  const auto produced = at(rank1, {ActionType::forward, 1, 0});
  ASSERT_NE(produced, rank1.end());
  EXPECT_EQ(*(produced + 1), (Action{ActionType::send_forward, 1, 0}));
  // The same schedule with the sends and receives written out reads the same.
  const Schedule again = parse_schedule_csv(schedule_csv(read), "lowered.csv", 0, 0);
  EXPECT_EQ(again.actions, read.actions);
}

// PyTorch's FSDP actions (with or without a micro-batch) are read and skipped; a near miss is still an error.
TEST(PipelineScheduleCsv, FsdpActionsAreSkipped) {
  const Schedule read = parse_schedule_csv(
      "0UNSHARD," + kRank0.substr(0, kRank0.size() - 1) + ",0RESHARD,0REDUCE_GRAD,0R1\n" + kRank1, "fsdp.csv", 2, 2);
  EXPECT_EQ(read.actions, generated("1F1B", 2, 2).actions);
  expect_error([] { parse_schedule_csv("0UNSHARDX\n", "near_miss.csv", 0, 0); }, {"'0UNSHARDX' is not an action"});
}

TEST(PipelineScheduleCsv, BadCellIsRefused) {
  const fs::path path = write_file("bad_cell.csv", kRank0 + "1RECV_F0,1F0,1B0,1SEND_B0,1X3\n");
  expect_error([&] { read_schedule_csv(path.string(), 0, 0); },
               {path.string() + " line 2, cell 5: '1X3' is not an action"});
  expect_error([&] { read_schedule_csv(path.string() + ".missing", 0, 0); }, {"cannot open"});
  const fs::path out_of_range = write_file("range.csv", kRank0 + kRank1);
  expect_error([&] { read_schedule_csv(out_of_range.string(), 2, 1); },
               {"line 1, cell 3: '0F1'", "micro-batch 1", "1 micro-batches"});
}

TEST(PipelineScheduleCheck, OrderingErrorsNameTheRankAndAction) {
  Schedule schedule = generated("1F1B", 2, 2);
  // A send before the forward that produces it.
  std::swap(schedule.actions[0][0], schedule.actions[0][1]);
  expect_error([&] { check_schedule(schedule); },
               {"rank 0, action 0 '0SEND_F0'", "needs '0F0' first", "later (action 1)"});

  Schedule duplicated = generated("1F1B", 2, 2);
  duplicated.actions[1].push_back({ActionType::full_backward, 1, 0});
  expect_error([&] { check_schedule(duplicated); }, {"rank 1, action 8 '1B0'", "repeats action 2"});

  Schedule local_send = generated("ZBVZeroBubble", 1, 2);
  local_send.actions[0].insert(local_send.actions[0].begin() + 1, {ActionType::send_forward, 0, 0});
  expect_error([&] { check_schedule(local_send); }, {"rank 0, action 1 '0SEND_F0'", "local"});

  Schedule no_weight = generated("ZBVZeroBubble", 2, 2);
  auto& row = no_weight.actions[0];
  const auto weight = std::find(row.begin(), row.end(), Action{ActionType::backward_weight, 3, 1});
  ASSERT_NE(weight, row.end());
  row.erase(weight);
  expect_error([&] { check_schedule(no_weight); }, {"rank 0", "'3I1'", "without its backward weight '3W1'"});

  Schedule no_forward = generated("GPipe", 2, 2);
  no_forward.actions[0].erase(no_forward.actions[0].begin() + 2, no_forward.actions[0].begin() + 4);  // 0F1, send
  no_forward.actions[1].erase(no_forward.actions[1].begin() + 2, no_forward.actions[1].begin() + 4);  // recv, 1F1
  expect_error([&] { check_schedule(no_forward); }, {"micro-batch 1 is skipped", "rank 0", "'0F1'"});
}

}  // namespace pipeline_schedule_test
}  // namespace titan::parallel::pipeline
