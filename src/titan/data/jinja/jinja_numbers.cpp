// The integer side of the interpreter: Python's slice indices, range()'s
// bounds, overflow-checked arithmetic and floor division and modulo.
#include "titan/data/jinja/jinja_renderer.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <optional>

namespace titan::data::jinja::detail {

SliceRange slice_range(int64_t length, const Value& start_v, const Value& stop_v, const Value& step_v) {
  const auto as_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.kind == Kind::None || v.kind == Kind::Undefined) return std::nullopt;
    if (!v.is_integral()) throw ValueError(fmt::format("slice {} must be an integer or none", what));
    return v.as_int();
  };
  const int64_t step = as_index(step_v, "step").value_or(1);
  if (step == 0) throw ValueError("slice step cannot be zero");
  const auto clamp = [&](std::optional<int64_t> index, int64_t lower_default, int64_t upper_default) {
    if (!index) return step > 0 ? lower_default : upper_default;
    int64_t i = *index;
    if (i < 0) {
      i = i < -length ? (step > 0 ? 0 : -1) : i + length;
    } else if (i >= length) {
      i = step > 0 ? length : length - 1;
    }
    return i;
  };
  SliceRange range;
  range.start = clamp(as_index(start_v, "start"), 0, length - 1);
  range.step = step;
  const int64_t stop = clamp(as_index(stop_v, "stop"), length, -1);
  // start and stop lie in [-1, length]: their difference cannot overflow; |step| can (INT64_MIN).
  if (step > 0 && range.start < stop) {
    range.count = static_cast<size_t>(static_cast<uint64_t>(stop - range.start - 1) / static_cast<uint64_t>(step) + 1);
  } else if (step < 0 && range.start > stop) {
    range.count =
        static_cast<size_t>(static_cast<uint64_t>(range.start - stop - 1) / (0 - static_cast<uint64_t>(step)) + 1);
  }
  return range;
}

Range range_of(const Args& args) {
  std::vector<int64_t> bounds;
  for (const Value& arg : args.positional) {
    if (!arg.is_integral()) throw ValueError("range() arguments must be integers");
    bounds.push_back(arg.as_int());
  }
  if (bounds.empty() || bounds.size() > 3 || !args.keyword.empty()) throw ValueError("range() takes 1 to 3 arguments");
  Range range;
  range.start = bounds.size() == 1 ? 0 : bounds[0];
  const int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
  range.step = bounds.size() == 3 ? bounds[2] : 1;
  if (range.step == 0) throw ValueError("range() step must not be zero");
  const auto distance = [](int64_t from, int64_t to) {
    return static_cast<uint64_t>(to) - static_cast<uint64_t>(from);
  };
  if (range.step > 0 && range.start < stop) {
    range.length = (distance(range.start, stop) - 1) / static_cast<uint64_t>(range.step) + 1;
  } else if (range.step < 0 && range.start > stop) {
    range.length = (distance(stop, range.start) - 1) / (0 - static_cast<uint64_t>(range.step)) + 1;
  }
  return range;
}

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw ValueError("integer overflow");
  return r;
}
int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) throw ValueError("integer overflow");
  return r;
}
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw ValueError("integer overflow");
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw ValueError("integer division or modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) throw ValueError("integer overflow");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) throw ValueError("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

}  // namespace titan::data::jinja::detail
