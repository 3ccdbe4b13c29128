// Other work on the machine, for benchmarks that measure how a job shares a
// CPU: `count` processes that each keep one core busy (a spin loop) for the
// object's lifetime. They die with the benchmark, even if it is killed.
#pragma once

#include <sys/types.h>

#include <vector>

namespace titan::bench {

class BusyCores {
 public:
  explicit BusyCores(int count);
  ~BusyCores();
  BusyCores(const BusyCores&) = delete;
  BusyCores& operator=(const BusyCores&) = delete;

 private:
  std::vector<pid_t> children_;
};

}  // namespace titan::bench
