// `titan bench delta-rule`: the chunked gated delta rule against the
// token-by-token recurrence (ops/delta_rule.h), forward and forward+backward.
#pragma once

#include <string>

namespace titan::bench {

struct DeltaRuleBenchOptions {
  int repeats = 5;
  int64_t tokens = 4096;
  int64_t batch = 1, heads = 4, key_dim = 128, value_dim = 128;
  std::string json_path;
};

int run_delta_rule_bench(const DeltaRuleBenchOptions& options);

}  // namespace titan::bench
