// `titan bench ops`: GEMM and attention throughput on this machine.
#pragma once

#include <string>

namespace titan::bench {

struct OpsBenchOptions {
  int repeats = 5;
  bool quick = false;     // fewer, smaller shapes (for smoke tests)
  std::string json_path;  // also write results as JSON when non-empty
};

int run_ops_bench(const OpsBenchOptions& options);

}  // namespace titan::bench
