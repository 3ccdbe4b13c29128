#include "titan/parallel/context_parallel_options.h"

#include "titan/core/error.h"

namespace titan::parallel {

RotateMethod parse_rotate_method(const std::string& name) {
  if (name == "allgather") return RotateMethod::allgather;
  if (name == "alltoall") return RotateMethod::alltoall;
  fail(
      "parallelism.context_parallel_rotate_method '{}': expected allgather or alltoall (a ring of point-to-point "
      "K/V passes)",
      name);
}

bool parse_load_balancer(const std::string& name) {
  if (name == "headtail") return true;
  if (name == "none" || name.empty()) return false;
  fail("parallelism.context_parallel_load_balancer '{}': expected headtail or none", name);
}

}  // namespace titan::parallel
