// The units titan's reports use: seconds on the steady clock and bytes per
// GiB, defined once.
#pragma once

#include <chrono>

namespace titan {

using SteadyClock = std::chrono::steady_clock;

// Seconds from `start` to now.
inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

inline constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace titan
