// Checks for numeric command-line options that say what was typed and the
// rule it broke ("--ranks: 0 is not a whole number >= 1"), never CLI11's raw
// range (its PositiveNumber prints a 309-digit bound and lets NaN through).
// Every check refuses NaN and infinities. The description is what --help
// shows after the option's type.
#pragma once

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace titan::cli {

namespace detail {

// The text as a finite number, or an error message.
inline std::string parse_finite(const std::string& text, double& value) {
  char* end = nullptr;
  errno = 0;
  value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) return fmt::format("'{}' is not a number", text);
  if (!std::isfinite(value) || errno == ERANGE) return fmt::format("'{}' is not a finite number", text);
  return "";
}

inline std::string bound_text(double bound) { return fmt::format("{:g}", bound); }

}  // namespace detail

// Whole numbers above 2^53 are refused: a double cannot tell them apart, and
// CLI11 would saturate a larger one to the integer type's maximum silently.
inline constexpr double kLargestWholeNumber = 9007199254740992.0;

// value >= minimum; `whole` also asks for an integer (the option's own type converts it).
inline CLI::Validator at_least(double minimum, bool whole = true) {
  const std::string rule = fmt::format("{} >= {}", whole ? "a whole number" : "a number", detail::bound_text(minimum));
  return CLI::Validator(
      [minimum, whole, rule](std::string& text) -> std::string {
        double value = 0;
        if (std::string error = detail::parse_finite(text, value); !error.empty()) return error + ": expected " + rule;
        if (value < minimum || (whole && value != std::floor(value))) return fmt::format("{} is not {}", text, rule);
        if (whole && value > kLargestWholeNumber) return fmt::format("{} is too large (at most 2^53)", text);
        return "";
      },
      fmt::format(">= {}", detail::bound_text(minimum)));
}

// value > bound (a number).
inline CLI::Validator greater_than(double bound) {
  const std::string rule = fmt::format("a number > {}", detail::bound_text(bound));
  return CLI::Validator(
      [bound, rule](std::string& text) -> std::string {
        double value = 0;
        if (std::string error = detail::parse_finite(text, value); !error.empty()) return error + ": expected " + rule;
        if (!(value > bound)) return fmt::format("{} is not {}", text, rule);
        return "";
      },
      fmt::format("> {}", detail::bound_text(bound)));
}

// low < value <= high when low_open, else low <= value <= high (a number).
inline CLI::Validator within(double low, double high, bool low_open = false) {
  const std::string rule =
      fmt::format("a number in {}{}, {}]", low_open ? "(" : "[", detail::bound_text(low), detail::bound_text(high));
  return CLI::Validator(
      [low, high, low_open, rule](std::string& text) -> std::string {
        double value = 0;
        if (std::string error = detail::parse_finite(text, value); !error.empty()) return error + ": expected " + rule;
        if ((low_open ? !(value > low) : value < low) || value > high) return fmt::format("{} is not {}", text, rule);
        return "";
      },
      fmt::format("in {}{}, {}]", low_open ? "(" : "[", detail::bound_text(low), detail::bound_text(high)));
}

}  // namespace titan::cli
