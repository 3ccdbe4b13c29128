// Pipeline schedules as CSV files, in the layout of PyTorch's pipelining
// `_load_csv` / `_dump_csv`: line r+1 lists rank r's actions in order, one
// action string per comma-separated cell ("0F3", "1SEND_B2"); empty cells are
// allowed (PyTorch writes them for idle slots) and skipped. A user can so hand
// a custom schedule to titan, or edit a generated one. A file of compute
// actions only (F, B, I, W: TorchTitan's custom schedules) gets its sends and
// receives as PyTorch's lowering adds them (with_communication); FSDP actions
// (UNSHARD, RESHARD, REDUCE_GRAD or R) are accepted and skipped, titan's FSDP
// scheduling its own gathers and reductions.
#pragma once

#include <string>

#include "titan/parallel/pipeline_schedule.h"

namespace titan::parallel::pipeline {

// Reads a schedule; each stage lives on the rank that runs its forwards (the
// rank running most of them if several do, so that a stray forward is reported
// by check_schedule as a stage the rank does not hold). stages or microbatches
// <= 0 take the largest index in the file plus one. Parse errors name the
// file, line and 1-based cell ("schedule.csv line 2, cell 5: '1X3' is not an
// action ..."). Does not check the schedule: call check_schedule for that.
Schedule read_schedule_csv(const std::string& path, int stages, int microbatches);
// The same from the file's text (`path` names it in errors).
Schedule parse_schedule_csv(const std::string& text, const std::string& path, int stages, int microbatches);

// The schedule in that layout, every action (compute and communication).
std::string schedule_csv(const Schedule& schedule);

}  // namespace titan::parallel::pipeline
