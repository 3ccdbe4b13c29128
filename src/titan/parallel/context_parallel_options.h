// The choices a job config makes for context parallelism, parsed apart from
// ring attention itself so that config validation (and its fuzzer) does not
// pull in the attention kernels.
#pragma once

#include <string>

namespace titan::parallel {

// parallelism.context_parallel_rotate_method: how keys and values reach every rank.
enum class RotateMethod { allgather, alltoall };
RotateMethod parse_rotate_method(const std::string& name);  // errors name the key and the choices

// parallelism.context_parallel_load_balancer: "headtail" (true) or "none".
bool parse_load_balancer(const std::string& name);

}  // namespace titan::parallel
