// libFuzzer entry point: flight recorder dumps (`titan debug flight-recorder`).
// The input is up to three dumps separated by 0x1e (the ASCII record
// separator, which no dump holds). Each is either refused with titan::Error
// or read; a single dump read writes back to JSON that reads again to the same
// text. Dumps that all read are analysed as one job's: the analyser may refuse
// them as a set (titan::Error), else it reports with exit code 0 or 1.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "titan/comm/flight_dump.h"
#include "titan/comm/flight_recorder_analysis.h"
#include "titan/core/error.h"

using namespace titan::comm;

namespace {

constexpr char kSeparator = '\x1e';
constexpr size_t kMostDumps = 3;

std::vector<std::string> split_dumps(const std::string& text) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (parts.size() + 1 < kMostDumps) {
    const size_t end = text.find(kSeparator, begin);
    if (end == std::string::npos) break;
    parts.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  parts.push_back(text.substr(begin));
  return parts;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string> parts = split_dumps(text);
  std::vector<FlightDump> dumps;
  for (size_t i = 0; i < parts.size(); ++i) {
    try {
      dumps.push_back(flight_dump_from_json(parts[i], "rank_" + std::to_string(i) + ".json"));
    } catch (const titan::Error&) {
      return 0;
    }
  }
  if (dumps.size() == 1) {
    const std::string written = flight_dump_to_json(dumps[0]);
    try {
      if (flight_dump_to_json(flight_dump_from_json(written, "written.json")) != written) std::abort();
    } catch (const titan::Error&) {
      std::abort();  // what we write must read back
    }
  }
  // As read_flight_dumps hands them over: ascending by rank.
  std::stable_sort(dumps.begin(), dumps.end(),
                   [](const FlightDump& a, const FlightDump& b) { return a.rank < b.rank; });
  FlightAnalysis analysis;
  try {
    analysis = analyse_flight_dumps(dumps);
  } catch (const titan::Error&) {
    return 0;
  }
  if ((analysis.exit_code != 0 && analysis.exit_code != 1) || analysis.report.empty() ||
      analysis.report.back() != '\n') {
    std::abort();
  }
  return 0;
}
