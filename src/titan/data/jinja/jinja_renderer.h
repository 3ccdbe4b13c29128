// The interpreter's inside, shared by the files that define it: the Renderer
// that walks a parsed template (each section below names the jinja_*.cpp that
// defines it) and the helpers those files have in common.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "titan/data/jinja/jinja_ast.h"
#include "titan/data/jinja/jinja_heap.h"
#include "titan/data/jinja/jinja_lexer.h"
#include "titan/data/jinja/jinja_limits.h"
#include "titan/data/jinja/jinja_value.h"

namespace titan::data::jinja::detail {

using Kind = Value::Kind;
using Missing = Value::Missing;

// The work a statement, an expression or a loop iteration counts, next to 1
// for each byte or item made or read: one takes as long as copying some 16 to
// 100 bytes, and Limits::max_work should bound time whatever a template does.
constexpr size_t kStepWork = 16;

// A call's arguments: positional, then keyword.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`, or null.
  const Value* get(size_t index, std::string_view name) const {
    for (const auto& [key, value] : keyword) {
      if (key == name) return &value;
    }
    return index < positional.size() ? &positional[index] : nullptr;
  }
};

[[noreturn]] inline void fail_undefined(const Value& value) { throw ValueError(undefined_message(value)); }

[[noreturn]] inline void fail_string_size(size_t max) {
  throw ValueError(fmt::format("a string exceeds the output limit of {} bytes", max));
}

// ----- string helpers (jinja_strings.cpp) -----

std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
std::string capitalize(const std::string& s);
std::string title(const std::string& s);
void replace(const std::string& s, const std::string& old, const std::string& replacement, int64_t count,
             size_t max_size, TextBuffer& out);
bool ascii_less_ignoring_case(const std::string& a, const std::string& b);
bool has_ascii_in_range(const std::string& s, char first, char last);

// ----- numbers, slices and ranges (jinja_numbers.cpp) -----

// Python's slice.indices for a sequence of `length` items: the first
// position, the step and how many positions the slice takes.
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  size_t count = 0;
};

SliceRange slice_range(int64_t length, const Value& start_v, const Value& stop_v, const Value& step_v);

// range()'s numbers, counted rather than listed: a for loop over range(n) needs no list.
struct Range {
  int64_t start = 0;
  int64_t step = 1;
  uint64_t length = 0;

  int64_t at(uint64_t i) const {
    // Wraps in unsigned arithmetic; the result lies between start and stop, so it fits.
    return static_cast<int64_t>(static_cast<uint64_t>(start) + i * static_cast<uint64_t>(step));
  }
};

Range range_of(const Args& args);

int64_t checked_add(int64_t a, int64_t b);
int64_t checked_sub(int64_t a, int64_t b);
int64_t checked_mul(int64_t a, int64_t b);
int64_t floor_div(int64_t a, int64_t b);
int64_t floor_mod(int64_t a, int64_t b);

// What a for loop walks: a list's items (shared, never copied), or range()'s numbers.
struct Sequence {
  Value list;  // a List; Undefined for a range
  Range range;
  size_t length = 0;

  Value at(size_t i) const {
    if (list.kind == Kind::List) return list.list()->items[i];
    return Value::of_int(range.at(i));
  }
};

class Renderer {
 public:
  Renderer(const std::string& where, const Limits& limits, Heap& heap) : where_(where), limits_(limits), heap_(heap) {}

  std::string run(const Body& body, const nlohmann::ordered_json& variables);

 private:
  enum class Flow { Normal, Break, Continue };

  [[noreturn]] void fail(int line, const std::string& message) const { fail_at(where_, line, message); }

  void charge(size_t amount) { heap_.work(amount); }

  void check_string_size(size_t size) const {
    if (size > limits_.max_output) fail_string_size(limits_.max_output);
  }

  // ----- values and output (jinja_renderer.cpp) -----

  Value new_string(std::string s);
  Value new_string(TextBuffer& text);
  Value str_of(const Value& value);
  Value stripped(const std::string& s, bool left, bool right, const Value* chars);
  Value from_json(const nlohmann::ordered_json& json, int depth);
  void emit(std::string_view text);
  void emit_value(const Value& value);

  // ----- variables (jinja_renderer.cpp) -----

  const Value* lookup(const std::string& name) const;
  void assign(const std::string& name, Value value);

  // ----- statements (jinja_renderer.cpp) -----

  Flow exec_body(const Body& body);
  Flow exec(const Node& node);
  Flow exec_node(const Node& node);
  std::vector<Value> unpack(const Value& value, size_t count);
  Value iterate(const Value& value);
  void bind_targets(const Node& node, const Value& item);
  bool is_range_call(const Expr& expr) const;
  Sequence sequence_of(const Expr& expr);
  void exec_for(const Node& node);
  void update_loop(Value& loop, const Sequence& sequence, size_t i);

  // ----- expressions (jinja_expressions.cpp) -----

  Value eval(const Expr& expr);
  Value eval_expr(const Expr& expr);
  Args eval_args(const Expr& expr, size_t first);
  Value hint(std::string text);
  Value get_attr(const Value& target, const std::string& name, Object* name_owner = nullptr);
  Value get_item(const Value& target, const Value& key);
  Value missing_item(const Value& target, const Value& key);
  Value slice(const Value& target, const Value& start, const Value& stop, const Value& step);
  Value slice_string(const std::string& s, const Value& start, const Value& stop, const Value& step);
  Value eval_unary(const std::string& op, const Value& operand);
  Value repeat(const Value& sequence, int64_t times);
  Value concat(const Value& a, const Value& b);
  Value binary(const std::string& op, const Value& a, const Value& b);
  bool contains(const Value& container, const Value& item);

  // ----- calls (jinja_calls.cpp) -----

  Value eval_call(const Expr& expr);
  Value call_value(const Value& function, const Args& args, const std::string& name);
  Value call_macro(const Node& macro, const Args& args);
  Value call_builtin(const std::string& name, const Args& args);
  const std::string& string_arg(const Args& args, size_t index, std::string_view name, const char* function);
  bool call_method(const Value& target, const std::string& name, const Expr& expr, Value& result);
  Value string_method(const std::string& s, const std::string& name, const Args& args);
  Value split(const std::string& s, const Args& args);
  void append_checked(TextBuffer& out, std::string_view piece);

  // ----- filters and tests (jinja_filters.cpp) -----

  Value apply_filter(const std::string& name, const Value& x, const Args& args);
  Value indent(const Value& x, const Args& args);
  Value get_path(const Value& item, const Value& path);
  bool apply_test(const std::string& name, const Value& x, const Args& args);

  const std::string& where_;
  const Limits& limits_;
  Heap& heap_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  size_t floor_ = 1;
  TextBuffer* out_ = nullptr;
  int call_depth_ = 0;
};

}  // namespace titan::data::jinja::detail
