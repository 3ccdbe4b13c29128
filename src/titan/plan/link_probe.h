// `titan plan --probe-links`: what the links between this machine's MPI ranks
// cost, measured with titan's own process group (the one training uses).
// Every rank of an mpirun world runs it; rank 0 prints one JSON object.
// measure_cpu_profile reads the link figures from it, and the collective
// cost test compares collective_cost's predictions with the collectives it times.
#pragma once

#include <string>
#include <vector>

#include "titan/plan/collective_cost.h"
#include "titan/plan/device_profile.h"

namespace titan::plan {

struct LinkProbeSample {
  double bytes = 0.0;
  double seconds = 0.0;  // median
};

struct LinkProbeCollective {
  Collective collective = Collective::all_gather;
  double bytes = 0.0;    // the call's larger buffer (collective_cost's `bytes`)
  double seconds = 0.0;  // median over the repetitions of the slowest rank's time
};

struct LinkProbeResult {
  int ranks = 0;
  // Ranks 0 and 1 alone (the others wait asleep): one-way time of a message.
  std::vector<LinkProbeSample> ping_pong;
  LinkProfile ping_pong_link;  // latency from the small messages, bandwidth from the large ones
  // Every rank sending to the next and receiving from the previous at once: a
  // ring step, what LinkProfile::bytes_per_second means. On one machine the
  // ranks share its cores and memory, so this is slower than ping-pong when
  // more ranks than cores run.
  // Timed over consecutive steps, as inside a ring collective (a step's
  // latency overlaps the neighbours' skew there).
  std::vector<LinkProbeSample> ring_step;
  LinkProfile ring_step_link;
  // A collective on a group of one (each rank its own, all at once): what
  // issuing a call costs beyond its messages (DeviceProfile::collective_overhead_seconds).
  double collective_overhead_seconds = 0.0;
  // A small collective on the whole group while every rank also runs
  // threads of arithmetic on its share of the cores (a training step's
  // compute): the cores are all busy,
  // so each rank's worker, and its peers', wait for the scheduler before they
  // move the messages. What a call costs inside a job whose ranks fill the cores.
  double contended_call_seconds = 0.0;
  std::vector<LinkProbeCollective> collectives;
};

// Runs the probe on every rank of this process's world (comm::World); rank 0
// prints the JSON object on one line of stdout. Returns the exit status.
int run_link_probe();

// The probe result in `output` (the first line that is a JSON object; other
// lines, such as a test binary's own, are skipped).
LinkProbeResult parse_link_probe(const std::string& output);

// Runs `command` (an mpirun of the probe on some ranks) and parses what it prints.
LinkProbeResult launch_link_probe(const std::string& command);
// `mpirun --allow-run-as-root --oversubscribe -np <ranks> <executable> plan --probe-links`.
std::string link_probe_command(const std::string& executable, int ranks);

// A latency-bandwidth fit of one-way times: latency from the messages up to
// 4 KiB; from 64 KiB up, two bandwidths (cached below a size, DRAM above it)
// with the split that fits best in log time (no split: one bandwidth).
LinkProfile fit_link(const std::vector<LinkProbeSample>& samples);

}  // namespace titan::plan
