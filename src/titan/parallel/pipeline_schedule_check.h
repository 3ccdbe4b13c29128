// Proving a pipeline schedule sound before any rank runs it, and timing it.
// A broken schedule (hand-written CSV or a generator bug) would otherwise show
// up as a hang in a point-to-point receive, or as a micro-batch whose gradient
// silently never reaches the weights.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "titan/parallel/pipeline_schedule.h"

namespace titan::parallel::pipeline {

// Runs every rank's actions in a model of the real execution: sends are
// buffered (they never block), a receive blocks until its matching send has
// run on the peer rank, and compute needs its inputs on its own rank:
//   F(s,m)    stage 0, or RECV_F(s,m) here, or F(s-1,m) here (local hand-off)
//   B/I(s,m)  F(s,m) here, and the last stage, or RECV_B(s,m) here, or
//             B/I(s+1,m) here
//   W(s,m)    I(s,m) here
//   SEND_F(s,m) F(s,m) here, stage s+1 on another rank (SEND_B: B/I, stage s-1)
// Throws titan::Error naming the rank, the action's 0-based index in the
// rank's list and the action when: an action names a stage or micro-batch that
// does not exist, or a stage the rank does not hold; an action repeats; a
// receive has no matching send (or a send no receive); a micro-batch of a
// stage lacks its forward or its backward (B, or both I and W); an action
// needs something its rank runs only later or never; or the ranks deadlock
// (then every blocked rank's receive and the send it waits for are listed —
// a cycle of ranks each receiving first from the other shows up this way).
void check_schedule(const Schedule& schedule);

struct Timeline {
  std::vector<std::vector<std::pair<double, Action>>> start_times;  // per rank, every action, in order
  std::vector<std::vector<double>> end_times;                       // per rank, parallel to start_times
  double makespan = 0;
  std::vector<double> busy;    // per rank, time spent computing
  double bubble_fraction = 0;  // mean over ranks of 1 - busy / makespan
};

// The schedule's timing when every rank starts each action as soon as its
// predecessor on the rank is done and (for a receive) the send has run:
// F costs forward_cost, I backward_input_cost, W backward_weight_cost, B their
// sum; communication is free. The bubble fraction is the "theoretical bubble"
// to print next to a measured one. Checks the schedule first.
Timeline simulate_schedule(const Schedule& schedule, double forward_cost = 1, double backward_input_cost = 1,
                           double backward_weight_cost = 1);

// One line per rank, one column per unit of time ("F0.3" = forward of stage 0,
// micro-batch 3; "." = idle), then the bubble fraction in percent.
std::string render_timeline(const Schedule& schedule, const Timeline& timeline);

}  // namespace titan::parallel::pipeline
