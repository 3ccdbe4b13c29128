// libFuzzer entry point: run histories (metrics.jsonl, read by `titan plot`
// and `titan compare`). Any input is either refused with titan::Error or reads
// to steps in ascending order, each metric logged only at those steps.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>

#include "titan/core/error.h"
#include "titan/train/run_history.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  titan::train::RunHistory history;
  try {
    history = titan::train::parse_run_history(text, "metrics.jsonl");
  } catch (const titan::Error&) {
    return 0;
  }
  if (std::adjacent_find(history.steps.begin(), history.steps.end(), std::greater_equal<int64_t>()) !=
      history.steps.end()) {
    std::abort();
  }
  for (const auto& [name, series] : history.metrics) {
    if (series.empty() || history.find(name) != &series) std::abort();
    for (const auto& [step, value] : series) {
      if (!std::binary_search(history.steps.begin(), history.steps.end(), step)) std::abort();
    }
  }
  return 0;
}
