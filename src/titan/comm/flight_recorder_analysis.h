// Reading a job's flight recorder dumps side by side (`titan debug
// flight-recorder DIR`): which rank is missing, and per process group the
// first collective the ranks disagree on, that some member never reached, or
// that did not complete, with the ranks on each side.
#pragma once

#include <string>
#include <vector>

#include "titan/comm/flight_dump.h"

namespace titan::comm {

// Every rank_<N>.json in `folder`, by rank. Throws titan::Error naming the
// file for a dump that cannot be read, and for dumps that contradict each
// other (two of one rank, different world sizes) or none at all.
std::vector<FlightDump> read_flight_dumps(const std::string& folder);

struct FlightAnalysis {
  int exit_code = 0;   // 0: every dump agrees and every collective completed; 1: a culprit was found
  std::string report;  // lines for a person, ending in a newline
};

// `dumps` as read_flight_dumps returns them (one per rank, ascending, same world size).
FlightAnalysis analyse_flight_dumps(const std::vector<FlightDump>& dumps);

}  // namespace titan::comm
