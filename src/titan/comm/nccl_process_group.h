// The `nccl` backend: CUDA tensors, NCCL collectives on a stream of their own.
// Only CUDA builds define it (TITAN_WITH_CUDA); the header names no CUDA or
// NCCL type so any file may include it.
#pragma once

#include <memory>
#include <string>

#include "titan/comm/process_group.h"

namespace titan::comm {

// A group of the ranks of `bootstrap` (a CPU group: mpi, or local for a world
// of one) communicating through NCCL on cuda:`device`. Rank 0 of `bootstrap`
// creates the NCCL unique id and broadcasts it over `bootstrap`; every member
// must call this. Throws titan::Error when no such device is visible.
std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<ProcessGroup> bootstrap, int device,
                                                      std::string name, double timeout_seconds);

}  // namespace titan::comm
