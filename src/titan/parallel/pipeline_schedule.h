// Pipeline-parallel schedules as data. A schedule is, for every pipeline rank,
// the ordered list of what it runs: the compute (forward, full backward, or the
// backward split into its input and weight halves) and the point-to-point
// sends and receives between stages. Keeping it as plain data (not as code
// that interleaves calls) lets one executor run every schedule, lets a user
// hand in their own as a CSV, and lets the checker prove a schedule complete and
// deadlock-free before any rank runs it. The notation and the schedule names
// are PyTorch's (torch.distributed.pipelining), as TorchTitan exposes them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace titan::parallel::pipeline {

enum class ActionType {
  forward,          // F: a stage's forward of one micro-batch
  full_backward,    // B: input and weight gradients together
  backward_input,   // I: gradient with respect to the stage's input only
  backward_weight,  // W: the deferred weight gradient (needs I first)
  send_forward,     // SEND_F: stage s sends its output to stage s+1's rank
  recv_forward,     // RECV_F: stage s receives stage s-1's output
  send_backward,    // SEND_B: stage s sends its input gradient to stage s-1's rank
  recv_backward,    // RECV_B: stage s receives stage s+1's input gradient
};

// A receive names the receiving stage and a send the sending one, as PyTorch
// does: "2SEND_F5" is matched by "3RECV_F5", "3SEND_B5" by "2RECV_B5".
struct Action {
  ActionType type = ActionType::forward;
  int stage = 0;
  int microbatch = 0;

  bool operator==(const Action&) const = default;
};

// Forward and the three backward kinds: the actions that take time.
bool is_compute(ActionType type);

struct Schedule {
  std::string name;  // the generator's name ("1F1B", ...) or the CSV file's path
  int ranks = 0, stages = 0, microbatches = 0;
  std::vector<int> stage_rank;               // stage -> pipeline rank that holds it
  std::vector<std::vector<Action>> actions;  // per rank, in execution order, compute and communication

  // The stages `rank` holds, ascending.
  std::vector<int> stages_of(int rank) const;
};

// A schedule from each rank's compute actions (`order`) with the sends and
// receives added as PyTorch's lowering does: a receive right before the
// compute that consumes it, a send right after the compute that produces it,
// and nothing where the neighbouring stage lives on the same rank (that
// hand-off is local). The generators use it, and so does a CSV of compute
// actions only.
Schedule with_communication(std::string name, int ranks, int microbatches, std::vector<int> stage_rank,
                            const std::vector<std::vector<Action>>& order);

// "<stage><type><microbatch>" with the types F, B, I, W, SEND_F, RECV_F, SEND_B,
// RECV_B: "0F3", "1I0", "2SEND_F5".
std::string action_string(const Action& action);
// The inverse of action_string; throws titan::Error ("'1X3' is not an action ...").
Action parse_action(const std::string& text);

// Schedules are checked and simulated over every (stage, micro-batch): a
// schedule of more than 1024 stages, 65536 micro-batches or 2^20 of both is
// refused (naming `where`) before anything is allocated for it.
void check_schedule_size(int64_t stages, int64_t microbatches, const std::string& where);

// The generators, in the spelling of parallelism.pipeline_parallel_schedule:
// GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble.
std::vector<std::string> schedule_names();

// The stages each rank holds under a schedule by default: 1 for GPipe and
// 1F1B; 2 for Interleaved1F1B and InterleavedZeroBubble (which accept any
// whole number >= 1); exactly 2 for ZBVZeroBubble. Throws on an unknown name.
int stages_per_rank(const std::string& name);

// The schedule `name` for `ranks` pipeline ranks, `stages` stages and
// `microbatches` micro-batches per step. Placement: GPipe and 1F1B put stage s
// on rank s (stages == ranks); the interleaved ones loop, stage s on rank
// s % ranks (stages a multiple of ranks); ZBVZeroBubble folds the stages into
// a V, rank r holding r and 2*ranks-1-r (stages == 2*ranks). Interleaved1F1B
// runs micro-batches in rounds as PyTorch does: microbatches must divide into
// max(1, microbatches / ranks) rounds (any multiple of ranks does). Throws
// titan::Error naming the parallelism.* key at fault.
Schedule generate_schedule(const std::string& name, int ranks, int stages, int microbatches);

}  // namespace titan::parallel::pipeline
