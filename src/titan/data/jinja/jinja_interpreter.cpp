#include "titan/data/jinja/jinja_interpreter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <iterator>
#include <limits>
#include <optional>
#include <unordered_map>

#include "titan/core/error.h"
#include "titan/data/jinja/jinja_heap.h"
#include "titan/data/jinja/jinja_lexer.h"
#include "titan/data/jinja/jinja_parser.h"
#include "titan/data/jinja/jinja_value.h"

namespace titan::data::jinja {

namespace {

using Kind = Value::Kind;
using Missing = Value::Missing;

// The work a statement, an expression or a loop iteration counts, next to 1
// for each byte or item made or read: one takes as long as copying some 16 to
// 100 bytes, and Limits::max_work should bound time whatever a template does.
constexpr size_t kStepWork = 16;

// jinja2's hints for the undefined values it makes itself.
const std::string kNoPreviousItem = "there is no previous item";
const std::string kNoNextItem = "there is no next item";
const std::string kNoFirstItem = "No first item, sequence was empty.";
const std::string kNoLastItem = "No last item, sequence was empty.";

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

[[noreturn]] void fail_undefined(const Value& value) { throw ValueError(undefined_message(value)); }

[[noreturn]] void fail_string_size(size_t max) {
  throw ValueError(fmt::format("a string exceeds the output limit of {} bytes", max));
}

// Python's str.upper()/lower() restricted to ASCII: chat templates apply them
// to roles and keywords; other letters pass through unchanged.
std::string ascii_upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}
std::string ascii_lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

// Jinja's title filter: each run after a space, '-', '(', '{', '[' or '<'
// starts upper case, the rest lower case.
std::string title(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool word_start = true;
  for (const char c : s) {
    const bool separator = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '-' ||
                           c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      out += c;
      word_start = true;
    } else {
      const bool lower = c >= 'a' && c <= 'z';
      const bool upper = c >= 'A' && c <= 'Z';
      if (word_start && lower) {
        out += static_cast<char>(c - 'a' + 'A');
      } else if (!word_start && upper) {
        out += static_cast<char>(c - 'A' + 'a');
      } else {
        out += c;
      }
      word_start = false;
    }
  }
  return out;
}

// Python's str.replace, including the empty `old` (insert between code
// points). The result's size is known before it is built, so a replacement
// that would exceed `max_size` bytes fails before allocating; `out` is charged.
void replace(const std::string& s, const std::string& old, const std::string& replacement, int64_t count,
             size_t max_size, TextBuffer& out) {
  size_t hits = 0;
  if (old.empty()) {
    hits = code_point_count(s) + 1;
  } else {
    for (size_t pos = s.find(old); pos != std::string::npos; pos = s.find(old, pos + old.size())) ++hits;
  }
  if (count >= 0) hits = std::min(hits, static_cast<size_t>(count));
  const size_t kept = s.size() - (old.empty() ? 0 : hits * old.size());
  if (!replacement.empty() && hits > (max_size - std::min(kept, max_size)) / replacement.size()) {
    fail_string_size(max_size);
  }
  if (kept > max_size) fail_string_size(max_size);
  out.reserve(kept + hits * replacement.size());
  const std::string_view text(s);
  size_t done = 0;
  if (old.empty()) {
    for (size_t i = 0; i < text.size();) {
      if (done < hits) {
        out.append(replacement);
        ++done;
      }
      const size_t n = code_point_length(text, i);
      out.append(text.substr(i, n));
      i += n;
    }
    if (done < hits) out.append(replacement);
    return;
  }
  size_t pos = 0;
  while (done < hits) {
    const size_t hit = text.find(old, pos);
    out.append(text.substr(pos, hit - pos));
    out.append(replacement);
    pos = hit + old.size();
    ++done;
  }
  out.append(text.substr(pos));
}

// a < b for strings, ignoring ASCII case, without lowering copies.
bool ascii_less_ignoring_case(const std::string& a, const std::string& b) {
  const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [&](char x, char y) {
    return static_cast<unsigned char>(lower(x)) < static_cast<unsigned char>(lower(y));
  });
}

bool has_ascii_in_range(const std::string& s, char first, char last) {
  return std::any_of(s.begin(), s.end(), [&](char c) { return c >= first && c <= last; });
}

// Python's slice.indices for a sequence of `length` items: the first
// position, the step and how many positions the slice takes.
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  size_t count = 0;
};

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

  std::string run(const Body& body, const nlohmann::ordered_json& variables) {
    static const std::string kBuiltins[] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};
    scopes_.emplace_back();  // 0: built-in functions
    for (const std::string& name : kBuiltins) {
      Value function = Value::make(Kind::Function);
      function.text = &name;
      scopes_[0][name] = function;
    }
    scopes_.emplace_back();  // 1: the template's variables and top-level sets
    if (variables.is_object()) {
      for (const auto& [key, item] : variables.items()) scopes_[1][key] = from_json(item, 0);
    }
    floor_ = 1;
    TextBuffer out(heap_, limits_.max_output);
    out_ = &out;
    exec_body(body);
    out_ = nullptr;
    return out.take();
  }

 private:
  enum class Flow { Normal, Break, Continue };

  [[noreturn]] void fail(int line, const std::string& message) const { fail_at(where_, line, message); }

  void charge(size_t amount) { heap_.work(amount); }

  void check_string_size(size_t size) const {
    if (size > limits_.max_output) fail_string_size(limits_.max_output);
  }

  Value new_string(std::string s) {
    check_string_size(s.size());
    charge(s.size() + 1);
    return heap_.string(std::move(s));
  }
  // The string a TextBuffer built (each append was checked against the size limit).
  Value new_string(TextBuffer& text) {
    charge(text.size() + 1);
    return text.into_value();
  }

  // Python's str(value) as a string value (a string is itself), no longer than a string may be.
  Value str_of(const Value& value) {
    if (value.kind == Kind::String) return value;
    Value text = to_str(value, heap_, limits_.max_output);
    charge(text.str().size());
    return text;
  }

  // s.strip(chars) and its kin; the set of code points in `chars` is charged while it lives.
  Value stripped(const std::string& s, bool left, bool right, const Value* chars) {
    const std::string* set = chars != nullptr && chars->kind == Kind::String ? &chars->str() : nullptr;
    const Scratch scratch(heap_, set != nullptr ? set->size() * sizeof(std::string_view) : 0);
    return new_string(strip(s, left, right, set));
  }

  // The variables' strings are borrowed, not copied: the JSON outlives the render.
  Value from_json(const nlohmann::ordered_json& json, int depth) {
    if (depth > 64) throw ValueError("a template variable nests too deeply");
    switch (json.type()) {
      case nlohmann::ordered_json::value_t::null:
        return Value::none();
      case nlohmann::ordered_json::value_t::boolean:
        return Value::of_bool(json.get<bool>());
      case nlohmann::ordered_json::value_t::number_integer:
        return Value::of_int(json.get<int64_t>());
      case nlohmann::ordered_json::value_t::number_unsigned: {
        const auto u = json.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value::of_float(double(u));
        return Value::of_int(static_cast<int64_t>(u));
      }
      case nlohmann::ordered_json::value_t::number_float:
        return Value::of_float(json.get<double>());
      case nlohmann::ordered_json::value_t::string:
        return Value::borrowed(json.get_ref<const std::string&>());
      case nlohmann::ordered_json::value_t::array: {
        ListBuilder items(heap_);
        items.reserve(json.size());
        for (const auto& item : json) items.push(from_json(item, depth + 1));
        return items.finish();
      }
      case nlohmann::ordered_json::value_t::object: {
        Value dict = heap_.dict(Kind::Dict);
        dict.dict()->reserve(json.size());
        // An ordered_json object's keys are already unique.
        for (const auto& [key, item] : json.items()) dict.dict()->append(key, from_json(item, depth + 1));
        return dict;
      }
      default:
        return Value();
    }
  }

  void emit(std::string_view text) {
    if (out_->size() + text.size() > limits_.max_output) {
      throw ValueError(fmt::format("the output exceeds the limit of {} bytes", limits_.max_output));
    }
    charge(text.size());
    out_->append(text);
  }
  void emit_value(const Value& value) {
    if (value.kind == Kind::String) {
      emit(value.str());
    } else {
      emit(str_of(value).str());
    }
  }

  // ----- variables -----

  const Value* lookup(const std::string& name) const {
    for (size_t i = scopes_.size(); i-- > floor_;) {
      const auto found = scopes_[i].find(name);
      if (found != scopes_[i].end()) return &found->second;
    }
    for (const size_t i : {size_t{1}, size_t{0}}) {
      if (i >= floor_) continue;
      const auto found = scopes_[i].find(name);
      if (found != scopes_[i].end()) return &found->second;
    }
    return nullptr;
  }
  void assign(const std::string& name, Value value) { scopes_.back()[name] = std::move(value); }

  // ----- statements -----

  Flow exec_body(const Body& body) {
    for (const auto& node : body) {
      const Flow flow = exec(*node);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow exec(const Node& node) {
    try {
      return exec_node(node);
    } catch (const ValueError& error) {
      fail(node.line, error.what());
    }
  }

  Flow exec_node(const Node& node) {
    charge(kStepWork);
    switch (node.kind) {
      case Node::Kind::Text:
        emit(node.text);
        return Flow::Normal;
      case Node::Kind::Output:
        emit_value(eval(*node.exprs[0]));
        return Flow::Normal;
      case Node::Kind::If:
        for (size_t i = 0; i < node.exprs.size(); ++i) {
          if (truthy(eval(*node.exprs[i]))) return exec_body(node.bodies[i]);
        }
        if (node.bodies.size() > node.exprs.size()) return exec_body(node.bodies.back());
        return Flow::Normal;
      case Node::Kind::For:
        exec_for(node);
        return Flow::Normal;
      case Node::Kind::Set: {
        Value value = eval(*node.exprs[0]);
        if (!node.attr.empty()) {
          const Value* target = lookup(node.targets[0]);
          if (target == nullptr || target->kind != Kind::Namespace) {
            fail(node.line, fmt::format("cannot assign attribute '{}' on '{}': it is not a namespace", node.attr,
                                        node.targets[0]));
          }
          target->dict()->set(node.attr, std::move(value));
        } else if (node.targets.size() == 1) {
          assign(node.targets[0], std::move(value));
        } else {
          const std::vector<Value> parts = unpack(value, node.targets.size());
          for (size_t i = 0; i < parts.size(); ++i) assign(node.targets[i], parts[i]);
        }
        return Flow::Normal;
      }
      case Node::Kind::SetBlock: {
        TextBuffer captured(heap_, limits_.max_output);
        TextBuffer* saved = out_;
        out_ = &captured;
        try {
          exec_body(node.bodies[0]);
        } catch (...) {
          out_ = saved;
          throw;
        }
        out_ = saved;
        assign(node.targets[0], captured.into_value());
        return Flow::Normal;
      }
      case Node::Kind::Macro: {
        Value macro = Value::make(Kind::Macro);
        macro.macro = &node;
        macro.text = &node.text;
        assign(node.text, macro);
        return Flow::Normal;
      }
      case Node::Kind::Break:
        return Flow::Break;
      case Node::Kind::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  }

  std::vector<Value> unpack(const Value& value, size_t count) {
    if (value.kind != Kind::List) {
      throw ValueError(fmt::format("cannot unpack a {} into {} names", type_name(value), count));
    }
    if (value.list()->items.size() != count) {
      throw ValueError(fmt::format("expected {} values to unpack, got {}", count, value.list()->items.size()));
    }
    return value.list()->items;
  }

  // The items a for loop or a filter walks, as a list: a list itself (shared),
  // a dict's keys, a string's code points.
  Value iterate(const Value& value) {
    switch (value.kind) {
      case Kind::Undefined:
        return ListBuilder(heap_).finish();
      case Kind::List:
        return value;
      case Kind::Dict: {
        ListBuilder keys(heap_);
        keys.reserve(value.dict()->items.size());
        // The keys stay in the dict, which lives as long as any of them.
        for (const auto& entry : value.dict()->items) keys.push(Value::borrowed(entry.first, value.object));
        return keys.finish();
      }
      case Kind::String: {
        const std::string& s = value.str();
        charge(s.size());
        ListBuilder chars(heap_);
        for (size_t i = 0; i < s.size();) {
          const size_t n = code_point_length(s, i);
          chars.push(heap_.code_point(std::string_view(s).substr(i, n)));
          i += n;
        }
        return chars.finish();
      }
      default:
        throw ValueError(fmt::format("'{}' object is not iterable", type_name(value)));
    }
  }

  void bind_targets(const Node& node, const Value& item) {
    if (node.targets.size() == 1) {
      assign(node.targets[0], item);
    } else {
      const std::vector<Value> parts = unpack(item, node.targets.size());
      for (size_t i = 0; i < parts.size(); ++i) assign(node.targets[i], parts[i]);
    }
  }

  // `expr` calls the built-in range(): a for loop then counts instead of listing.
  bool is_range_call(const Expr& expr) const {
    if (expr.kind != Expr::Kind::Call || expr.args[0]->kind != Expr::Kind::Name || expr.args[0]->name != "range") {
      return false;
    }
    const Value* function = lookup("range");
    return function != nullptr && function->kind == Kind::Function && function->str() == "range";
  }

  Sequence sequence_of(const Expr& expr) {
    Sequence sequence;
    if (is_range_call(expr)) {
      charge(kStepWork);
      sequence.range = range_of(eval_args(expr, 1));
      sequence.length = sequence.range.length;
      return sequence;
    }
    sequence.list = iterate(eval(expr));
    sequence.length = sequence.list.list()->items.size();
    return sequence;
  }

  void exec_for(const Node& node) {
    Sequence sequence = sequence_of(*node.exprs[0]);
    scopes_.emplace_back();
    struct PopScope {
      ~PopScope() { scopes.pop_back(); }
      std::vector<std::unordered_map<std::string, Value>>& scopes;
    } pop{scopes_};
    // `for x in xs if cond` filters first: loop.length and loop.last count the kept items.
    if (node.exprs.size() > 1) {
      ListBuilder kept(heap_);
      for (size_t i = 0; i < sequence.length; ++i) {
        charge(kStepWork);
        Value item = sequence.at(i);
        bind_targets(node, item);
        if (truthy(eval(*node.exprs[1]))) kept.push(std::move(item));
      }
      sequence = Sequence();
      sequence.length = kept.size();
      sequence.list = kept.finish();
    }
    if (sequence.length == 0) {
      exec_body(node.bodies[1]);
      return;
    }
    Value loop;
    for (size_t i = 0; i < sequence.length; ++i) {
      charge(kStepWork);
      update_loop(loop, sequence, i);
      bind_targets(node, sequence.at(i));
      if (exec_body(node.bodies[0]) == Flow::Break) break;
    }
  }

  // Points `loop` at iteration i. The dict is updated in place while only
  // this loop holds it (here and in the scope), instead of made anew each time.
  void update_loop(Value& loop, const Sequence& sequence, size_t i) {
    static const char* const kKeys[] = {"index",  "index0", "revindex", "revindex0", "first",   "last",
                                        "length", "depth",  "depth0",   "previtem",  "nextitem"};
    Value& slot = scopes_.back()["loop"];
    if (loop.kind != Kind::Dict || slot.object != loop.object || loop.object->refs != 2) {
      loop = heap_.dict(Kind::Dict);
      loop.dict()->reserve(std::size(kKeys));
      for (const char* key : kKeys) loop.dict()->append(key, Value());
      slot = loop;
    }
    auto& items = loop.dict()->items;
    const auto length = static_cast<int64_t>(sequence.length);
    const auto index = static_cast<int64_t>(i);
    items[0].second = Value::of_int(index + 1);
    items[1].second = Value::of_int(index);
    items[2].second = Value::of_int(length - index);
    items[3].second = Value::of_int(length - index - 1);
    items[4].second = Value::of_bool(i == 0);
    items[5].second = Value::of_bool(i + 1 == sequence.length);
    items[6].second = Value::of_int(length);
    items[7].second = Value::of_int(1);
    items[8].second = Value::of_int(0);
    items[9].second = i > 0 ? sequence.at(i - 1) : Value::undefined(Missing::Hint, kNoPreviousItem);
    items[10].second = i + 1 < sequence.length ? sequence.at(i + 1) : Value::undefined(Missing::Hint, kNoNextItem);
  }

  // ----- expressions -----

  Value eval(const Expr& expr) {
    try {
      charge(kStepWork);
      return eval_expr(expr);
    } catch (const ValueError& error) {
      fail(expr.line, error.what());
    }
  }

  Value eval_expr(const Expr& expr) {
    switch (expr.kind) {
      case Expr::Kind::None:
        return Value::none();
      case Expr::Kind::Bool:
        return Value::of_bool(expr.flag);
      case Expr::Kind::Integer:
        return Value::of_int(expr.integer);
      case Expr::Kind::Float:
        return Value::of_float(expr.number);
      case Expr::Kind::String:
        return Value::borrowed(expr.name);  // the template outlives the render
      case Expr::Kind::Name: {
        const Value* value = lookup(expr.name);
        return value == nullptr ? Value::undefined(Missing::Variable, expr.name) : *value;
      }
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        ListBuilder items(heap_);
        items.reserve(expr.args.size());
        for (const auto& arg : expr.args) items.push(eval(*arg));
        return items.finish();
      }
      case Expr::Kind::Dict: {
        Value dict = heap_.dict(Kind::Dict);
        for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
          const Value key = eval(*expr.args[i]);
          if (key.kind != Kind::String) throw ValueError("dict keys must be strings");
          dict.dict()->set(key.str(), eval(*expr.args[i + 1]));
        }
        return dict;
      }
      case Expr::Kind::Attr:
        return get_attr(eval(*expr.args[0]), expr.name);
      case Expr::Kind::Item: {
        const Value target = eval(*expr.args[0]);
        return get_item(target, eval(*expr.args[1]));
      }
      case Expr::Kind::Slice: {
        const Value target = eval(*expr.args[0]);
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (expr.args[static_cast<size_t>(i + 1)]) parts[i] = eval(*expr.args[static_cast<size_t>(i + 1)]);
        }
        return slice(target, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::Call:
        return eval_call(expr);
      case Expr::Kind::Filter: {
        const Value operand = eval(*expr.args[0]);
        return apply_filter(expr.name, operand, eval_args(expr, 1));
      }
      case Expr::Kind::Test: {
        const Value operand = eval(*expr.args[0]);
        const bool result = apply_test(expr.name, operand, eval_args(expr, 1));
        return Value::of_bool(result != expr.flag);
      }
      case Expr::Kind::Unary:
        return eval_unary(expr.name, eval(*expr.args[0]));
      case Expr::Kind::Binary: {
        if (expr.name == "and" || expr.name == "or") {
          Value left = eval(*expr.args[0]);
          if (truthy(left) == (expr.name == "or")) return left;
          return eval(*expr.args[1]);
        }
        const Value left = eval(*expr.args[0]);
        const Value right = eval(*expr.args[1]);
        return binary(expr.name, left, right);
      }
      case Expr::Kind::Ternary:
        if (truthy(eval(*expr.args[0]))) return eval(*expr.args[1]);
        if (expr.args[2]) return eval(*expr.args[2]);
        return hint(fmt::format(
            "the inline if-expression on line {} evaluated to false and no else section was defined.", expr.line));
    }
    return Value();
  }

  Args eval_args(const Expr& expr, size_t first) {
    Args args;
    const size_t keyword_start = expr.args.size() - expr.kwargs.size();
    for (size_t i = first; i < expr.args.size(); ++i) {
      if (i < keyword_start) {
        args.positional.push_back(eval(*expr.args[i]));
      } else {
        args.keyword.emplace_back(expr.kwargs[i - keyword_start], eval(*expr.args[i]));
      }
    }
    return args;
  }

  // An undefined value whose error is `text`.
  Value hint(std::string text) {
    const Value owner = new_string(std::move(text));
    return Value::undefined(Missing::Hint, owner.str(), owner.object);
  }

  // target.name. As in jinja2, a missing attribute is undefined, but looking
  // inside an undefined value is an error that says how it came about.
  // `name` lives in the template or in `name_owner`.
  Value get_attr(const Value& target, const std::string& name, Object* name_owner = nullptr) {
    if (target.is_undefined()) fail_undefined(target);
    if (target.kind == Kind::Dict || target.kind == Kind::Namespace) {
      const Value* found = target.dict()->find(name);
      if (found != nullptr) return *found;
    }
    Value missing = Value::undefined(Missing::Attribute, name, name_owner);
    missing.missing_on = target.kind;
    return missing;
  }

  Value get_item(const Value& target, const Value& key) {
    if (target.is_undefined()) fail_undefined(target);
    switch (target.kind) {
      case Kind::Dict:
      case Kind::Namespace:
        if (key.kind == Kind::String) {
          const Value* found = target.dict()->find(key.str());
          if (found != nullptr) return *found;
        }
        break;
      case Kind::List:
        if (key.is_integral()) {
          const auto size = static_cast<int64_t>(target.list()->items.size());
          int64_t index = key.as_int();
          if (index < 0) index += size;
          if (index >= 0 && index < size) return target.list()->items[static_cast<size_t>(index)];
        }
        break;
      case Kind::String:
        if (key.is_integral()) {
          // Walk to the code point in place: indexing never splits the string into a vector.
          const std::string& s = target.str();
          charge(s.size());
          int64_t index = key.as_int();
          if (index < 0) index += static_cast<int64_t>(code_point_count(s));
          int64_t at = 0;
          for (size_t i = 0; index >= 0 && i < s.size(); ++at) {
            const size_t n = code_point_length(s, i);
            if (at == index) return heap_.code_point(std::string_view(s).substr(i, n));
            i += n;
          }
        }
        break;
      default:
        break;
    }
    return missing_item(target, key);
  }

  // The undefined value of target[key] when there is none: jinja2 reports a
  // string key as an attribute, anything else as an element.
  Value missing_item(const Value& target, const Value& key) {
    Value missing;
    if (key.kind == Kind::String) {
      missing = Value::undefined(Missing::Attribute, key.str(), key.object);
    } else if (key.kind == Kind::Int) {
      missing.missing = Missing::Index;
      missing.integer = key.integer;
    } else {
      const Value text = repr(key, heap_, limits_.max_output);
      missing = Value::undefined(Missing::Element, text.str(), text.object);
    }
    missing.missing_on = target.kind;
    return missing;
  }

  Value slice(const Value& target, const Value& start, const Value& stop, const Value& step) {
    if (target.kind == Kind::List) {
      const auto& items = target.list()->items;
      const SliceRange range = slice_range(static_cast<int64_t>(items.size()), start, stop, step);
      ListBuilder out(heap_);
      out.reserve(range.count);
      for (size_t k = 0; k < range.count; ++k) {
        out.push(items[static_cast<size_t>(range.start + static_cast<int64_t>(k) * range.step)]);
      }
      charge(range.count);
      return out.finish();
    }
    if (target.kind == Kind::String) return slice_string(target.str(), start, stop, step);
    if (target.kind == Kind::Undefined) fail_undefined(target);
    throw ValueError(fmt::format("'{}' object is not subscriptable", type_name(target)));
  }

  // A string slice by walking its code points in place; a negative step fills
  // the result from its end.
  Value slice_string(const std::string& s, const Value& start, const Value& stop, const Value& step) {
    charge(s.size());
    const SliceRange range = slice_range(static_cast<int64_t>(code_point_count(s)), start, stop, step);
    if (range.count == 0) return Value::borrowed(kNoText);
    const int64_t last = range.start + static_cast<int64_t>(range.count - 1) * range.step;
    const int64_t low = std::min(range.start, last);
    const int64_t high = std::max(range.start, last);
    const uint64_t stride = range.step > 0 ? static_cast<uint64_t>(range.step) : 0 - static_cast<uint64_t>(range.step);
    const std::string_view text(s);
    // Calls visit(byte offset, length) for each picked code point, in order.
    const auto walk = [&](auto&& visit) {
      int64_t at = 0;
      for (size_t i = 0; i < text.size() && at <= high; ++at) {
        const size_t n = code_point_length(text, i);
        if (at >= low && static_cast<uint64_t>(at - low) % stride == 0) visit(i, n);
        i += n;
      }
    };
    TextBuffer out(heap_, limits_.max_output);
    if (range.step == 1) {
      size_t begin = std::string::npos;
      size_t end = 0;
      walk([&](size_t i, size_t n) {
        if (begin == std::string::npos) begin = i;
        end = i + n;
      });
      out.append(text.substr(begin, end - begin));
    } else if (range.step > 0) {
      walk([&](size_t i, size_t n) { out.append(text.substr(i, n)); });
    } else {
      size_t total = 0;
      walk([&](size_t, size_t n) { total += n; });
      out.append(total, '\0');
      walk([&](size_t i, size_t n) {
        total -= n;
        std::memcpy(out.text().data() + total, text.data() + i, n);
      });
    }
    return new_string(out);
  }

  Value eval_unary(const std::string& op, const Value& operand) {
    if (op == "not") return Value::of_bool(!truthy(operand));
    if (operand.is_undefined()) fail_undefined(operand);
    if (!operand.is_number())
      throw ValueError(fmt::format("bad operand type for unary {}: '{}'", op, type_name(operand)));
    if (op == "+") return operand.kind == Kind::Bool ? Value::of_int(operand.as_int()) : operand;
    if (operand.kind == Kind::Float) return Value::of_float(-operand.number);
    return Value::of_int(checked_sub(int64_t{0}, operand.as_int()));
  }

  Value repeat(const Value& sequence, int64_t times) {
    const size_t n = times < 0 ? 0 : static_cast<size_t>(times);
    if (sequence.kind == Kind::String) {
      const std::string& s = sequence.str();
      if (n != 0 && s.size() > limits_.max_output / n) fail_string_size(limits_.max_output);
      TextBuffer out(heap_, limits_.max_output);
      out.reserve(s.size() * n);
      for (size_t i = 0; i < n; ++i) out.append(s);
      return new_string(out);
    }
    const auto& items = sequence.list()->items;
    charge(n != 0 && items.size() > SIZE_MAX / n ? SIZE_MAX : items.size() * n);
    ListBuilder out(heap_);
    out.reserve(items.size() * n);
    for (size_t i = 0; i < n; ++i) {
      for (const Value& item : items) out.push(item);
    }
    return out.finish();
  }

  // a ~ b, sized before it is built.
  Value concat(const Value& a, const Value& b) {
    const Value x = str_of(a);
    const Value y = str_of(b);
    check_string_size(x.str().size() + y.str().size());
    TextBuffer out(heap_, limits_.max_output);
    out.reserve(x.str().size() + y.str().size());
    out.append(x.str());
    out.append(y.str());
    return new_string(out);
  }

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Value::of_bool(equals(a, b));
    if (op == "!=") return Value::of_bool(!equals(a, b));
    if (op == "in") return Value::of_bool(contains(b, a));
    if (op == "not in") return Value::of_bool(!contains(b, a));
    if (op == "~") return concat(a, b);
    // jinja2's Undefined refuses arithmetic and ordering.
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    if (op == "<") return Value::of_bool(compare(a, b) < 0);
    if (op == ">") return Value::of_bool(compare(a, b) > 0);
    if (op == "<=") return Value::of_bool(compare(a, b) <= 0);
    if (op == ">=") return Value::of_bool(compare(a, b) >= 0);
    const auto unsupported = [&]() -> Value {
      throw ValueError(
          fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
    };
    if (a.is_number() && b.is_number()) {
      const bool integral = a.is_integral() && b.is_integral();
      const int64_t x = a.as_int();
      const int64_t y = b.as_int();
      const double p = a.as_double();
      const double q = b.as_double();
      if (op == "+") {
        return integral ? Value::of_int(checked_add(x, y)) : Value::of_float(p + q);
      }
      if (op == "-") {
        return integral ? Value::of_int(checked_sub(x, y)) : Value::of_float(p - q);
      }
      if (op == "*") {
        return integral ? Value::of_int(checked_mul(x, y)) : Value::of_float(p * q);
      }
      if (op == "/") {
        if (q == 0) throw ValueError("division by zero");
        return Value::of_float(p / q);
      }
      if (op == "//") {
        if (integral) return Value::of_int(floor_div(x, y));
        if (q == 0) throw ValueError("float floor division by zero");
        return Value::of_float(std::floor(p / q));
      }
      if (op == "%") {
        if (integral) return Value::of_int(floor_mod(x, y));
        if (q == 0) throw ValueError("float modulo by zero");
        double m = std::fmod(p, q);
        if (m != 0 && ((m < 0) != (q < 0))) m += q;
        return Value::of_float(m);
      }
      if (op == "**") {
        if (integral && y >= 0) {
          if (x == 0) return Value::of_int(y == 0 ? 1 : 0);
          if (x == 1) return Value::of_int(1);
          if (x == -1) return Value::of_int(y % 2 == 0 ? 1 : -1);
          int64_t result = 1;  // |x| >= 2: overflow stops this within 63 steps
          for (int64_t i = 0; i < y; ++i) result = checked_mul(result, x);
          return Value::of_int(result);
        }
        if (p == 0 && q < 0) throw ValueError("0.0 cannot be raised to a negative power");
        return Value::of_float(std::pow(p, q));
      }
      return unsupported();
    }
    if (op == "+") {
      if (a.kind == Kind::String && b.kind == Kind::String) return concat(a, b);
      if (a.kind == Kind::List && b.kind == Kind::List) {
        const auto& x = a.list()->items;
        const auto& y = b.list()->items;
        charge(x.size() + y.size());
        ListBuilder out(heap_);
        out.reserve(x.size() + y.size());
        for (const Value& item : x) out.push(item);
        for (const Value& item : y) out.push(item);
        return out.finish();
      }
    }
    if (op == "*") {
      if ((a.kind == Kind::String || a.kind == Kind::List) && b.is_integral()) return repeat(a, b.as_int());
      if ((b.kind == Kind::String || b.kind == Kind::List) && a.is_integral()) return repeat(b, a.as_int());
    }
    return unsupported();
  }

  bool contains(const Value& container, const Value& item) {
    switch (container.kind) {
      case Kind::Undefined:
        return false;
      case Kind::String:
        if (item.kind != Kind::String) {
          throw ValueError(fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
        }
        charge(container.str().size());
        return container.str().find(item.str()) != std::string::npos;
      case Kind::List:
        for (const Value& candidate : container.list()->items) {
          charge(1);
          if (equals(candidate, item)) return true;
        }
        return false;
      case Kind::Dict:
        return item.kind == Kind::String && container.dict()->find(item.str()) != nullptr;
      default:
        throw ValueError(fmt::format("argument of type '{}' is not iterable", type_name(container)));
    }
  }

  // ----- calls -----

  Value eval_call(const Expr& expr) {
    const Expr& callee = *expr.args[0];
    if (callee.kind == Expr::Kind::Attr) {
      const Value target = eval(*callee.args[0]);
      if (target.is_undefined()) fail_undefined(target);
      Value result;
      if (call_method(target, callee.name, expr, result)) return result;
      const Value function = get_attr(target, callee.name);
      if (function.is_undefined()) fail_undefined(function);
      return call_value(function, eval_args(expr, 1), callee.name);
    }
    const Value function = eval(callee);
    if (function.is_undefined()) fail_undefined(function);
    const std::string name = callee.kind == Expr::Kind::Name ? callee.name : "the value";
    return call_value(function, eval_args(expr, 1), name);
  }

  Value call_value(const Value& function, const Args& args, const std::string& name) {
    if (function.kind == Kind::Macro) return call_macro(*function.macro, args);
    if (function.kind == Kind::Function) return call_builtin(function.str(), args);
    throw ValueError(fmt::format("'{}' ({}) is not callable", name, type_name(function)));
  }

  Value call_macro(const Node& macro, const Args& args) {
    if (call_depth_ >= limits_.max_call_depth) {
      throw ValueError(fmt::format("macros nest deeper than {} calls", limits_.max_call_depth));
    }
    if (args.positional.size() > macro.targets.size()) {
      throw ValueError(fmt::format("macro '{}' takes {} arguments, got {}", macro.text, macro.targets.size(),
                                   args.positional.size()));
    }
    const size_t saved_floor = floor_;
    scopes_.emplace_back();
    floor_ = scopes_.size() - 1;
    ++call_depth_;
    TextBuffer captured(heap_, limits_.max_output);
    TextBuffer* saved_out = out_;
    out_ = &captured;
    const auto restore = [&] {
      out_ = saved_out;
      --call_depth_;
      scopes_.pop_back();
      floor_ = saved_floor;
    };
    try {
      for (size_t i = 0; i < macro.targets.size(); ++i) {
        const Value* given = args.get(i, macro.targets[i]);
        if (given != nullptr) {
          assign(macro.targets[i], *given);
        } else if (macro.exprs[i]) {
          assign(macro.targets[i], eval(*macro.exprs[i]));
        } else {
          assign(macro.targets[i], Value::undefined(Missing::Parameter, macro.targets[i]));
        }
      }
      for (const auto& [key, value] : args.keyword) {
        if (std::find(macro.targets.begin(), macro.targets.end(), key) == macro.targets.end()) {
          throw ValueError(fmt::format("macro '{}' has no argument '{}'", macro.text, key));
        }
      }
      exec_body(macro.bodies[0]);
    } catch (...) {
      restore();
      throw;
    }
    restore();
    charge(kStepWork);
    return captured.into_value();
  }

  Value call_builtin(const std::string& name, const Args& args) {
    if (name == "raise_exception") {
      const Value* message = args.get(0, "message");
      throw ValueError(message == nullptr ? std::string("raise_exception() called") : str_of(*message).str());
    }
    if (name == "range") {
      const Range range = range_of(args);
      ListBuilder items(heap_);
      items.reserve(static_cast<size_t>(std::min<uint64_t>(range.length, std::numeric_limits<size_t>::max())));
      for (uint64_t i = 0; i < range.length; ++i) {
        charge(1);
        items.push(Value::of_int(range.at(i)));
      }
      return items.finish();
    }
    if (name == "namespace" || name == "dict") {
      Value result = heap_.dict(name == "namespace" ? Kind::Namespace : Kind::Dict);
      if (!args.positional.empty()) {
        const Value& source = args.positional[0];
        if (args.positional.size() > 1 || source.kind != Kind::Dict) {
          throw ValueError(name + "() takes at most one dict and keyword arguments");
        }
        for (const auto& [key, value] : source.dict()->items) result.dict()->set(key, value);
      }
      for (const auto& [key, value] : args.keyword) result.dict()->set(key, value);
      return result;
    }
    if (name == "strftime_now") {
      const Value* format = args.get(0, "format");
      if (format == nullptr || format->kind != Kind::String) throw ValueError("strftime_now() needs a format string");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buffer[256];
      const size_t n = std::strftime(buffer, sizeof(buffer), format->str().c_str(), &local);
      return new_string(std::string(buffer, n));
    }
    throw ValueError(fmt::format("'{}' is not callable", name));
  }

  const std::string& string_arg(const Args& args, size_t index, std::string_view name, const char* function) {
    const Value* value = args.get(index, name);
    if (value == nullptr || value->kind != Kind::String) {
      throw ValueError(fmt::format("{}() argument '{}' must be a string", function, name));
    }
    return value->str();
  }

  // Python's str and dict methods; true when `name` is one.
  bool call_method(const Value& target, const std::string& name, const Expr& expr, Value& result) {
    if (target.kind == Kind::String) {
      static const char* const kMethods[] = {"strip",   "lstrip",     "rstrip",     "upper",    "lower",
                                             "title",   "capitalize", "startswith", "endswith", "split",
                                             "replace", "join",       "find",       "count"};
      if (std::find_if(std::begin(kMethods), std::end(kMethods), [&](const char* m) { return name == m; }) ==
          std::end(kMethods)) {
        return false;
      }
      const Args args = eval_args(expr, 1);
      result = string_method(target.str(), name, args);
      return true;
    }
    if (target.kind == Kind::Dict) {
      if (name != "get" && name != "items" && name != "keys" && name != "values") return false;
      const Args args = eval_args(expr, 1);
      if (name == "get") {
        const Value* key = args.get(0, "key");
        if (key == nullptr) throw ValueError("get() needs a key");
        const Value* found = key->kind == Kind::String ? target.dict()->find(key->str()) : nullptr;
        const Value* fallback = args.get(1, "default");
        result = found != nullptr ? *found : fallback != nullptr ? *fallback : Value::none();
      } else {
        ListBuilder items(heap_);
        items.reserve(target.dict()->items.size());
        for (const auto& [key, value] : target.dict()->items) {
          if (name == "keys") {
            items.push(Value::borrowed(key, target.object));
          } else if (name == "values") {
            items.push(value);
          } else {
            items.push(heap_.list({Value::borrowed(key, target.object), value}));
          }
        }
        result = items.finish();
      }
      return true;
    }
    return false;
  }

  Value string_method(const std::string& s, const std::string& name, const Args& args) {
    charge(s.size());  // every method below reads the whole string at worst
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return stripped(s, name != "rstrip", name != "lstrip", args.get(0, "chars"));
    }
    if (name == "upper") return new_string(ascii_upper(s));
    if (name == "lower") return new_string(ascii_lower(s));
    if (name == "title") return new_string(title(s));
    if (name == "capitalize") return new_string(capitalize(s));
    if (name == "startswith" || name == "endswith") {
      const Value* pattern = args.get(0, "prefix");
      if (pattern == nullptr) throw ValueError(name + "() needs an argument");
      const auto hit = [&](const Value& candidate) {
        if (candidate.kind != Kind::String) throw ValueError(name + "() arguments must be strings");
        const std::string& p = candidate.str();
        return p.size() <= s.size() && (name == "startswith" ? s.compare(0, p.size(), p) == 0
                                                             : s.compare(s.size() - p.size(), p.size(), p) == 0);
      };
      if (pattern->kind != Kind::List) return Value::of_bool(hit(*pattern));
      for (const Value& candidate : pattern->list()->items) {
        charge(1);
        if (hit(candidate)) return Value::of_bool(true);
      }
      return Value::of_bool(false);
    }
    if (name == "split") return split(s, args);
    if (name == "replace") {
      const Value* count = args.get(2, "count");
      TextBuffer out(heap_, limits_.max_output);
      replace(s, string_arg(args, 0, "old", "replace"), string_arg(args, 1, "new", "replace"),
              count != nullptr && count->is_integral() ? count->as_int() : -1, limits_.max_output, out);
      return new_string(out);
    }
    if (name == "join") {
      const Value* items = args.get(0, "iterable");
      if (items == nullptr) throw ValueError("join() needs an iterable");
      const Value list = iterate(*items);
      TextBuffer out(heap_, limits_.max_output);
      bool first = true;
      for (const Value& item : list.list()->items) {
        if (item.kind != Kind::String) throw ValueError("join() items must be strings");
        if (!first) append_checked(out, s);
        first = false;
        append_checked(out, item.str());
      }
      return new_string(out);
    }
    if (name == "find") {
      const size_t hit = s.find(string_arg(args, 0, "sub", "find"));
      return Value::of_int(
          hit == std::string::npos ? -1 : static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, hit))));
    }
    // count
    const std::string& sub = string_arg(args, 0, "sub", "count");
    if (sub.empty()) return Value::of_int(static_cast<int64_t>(code_point_count(s)) + 1);
    int64_t count = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++count;
    return Value::of_int(count);
  }

  Value split(const std::string& s, const Args& args) {
    const Value* sep = args.get(0, "sep");
    const Value* max_value = args.get(1, "maxsplit");
    const int64_t max_split = max_value != nullptr && max_value->is_integral() ? max_value->as_int() : -1;
    const std::string_view text(s);
    ListBuilder parts(heap_);
    if (sep == nullptr || sep->kind == Kind::None) {
      size_t i = 0;
      const auto space_at = [&](size_t at, size_t& n) {
        n = code_point_length(text, at);
        return is_python_space(text.substr(at, n));
      };
      size_t n = 0;
      while (i < text.size()) {
        while (i < text.size() && space_at(i, n)) i += n;
        if (i >= text.size()) break;
        if (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) {
          parts.push(new_string(strip(text.substr(i), false, true)));
          break;
        }
        const size_t word = i;
        while (i < text.size() && !space_at(i, n)) i += n;
        parts.push(new_string(std::string(text.substr(word, i - word))));
      }
    } else {
      if (sep->kind != Kind::String) throw ValueError("split() separator must be a string or none");
      const std::string& separator = sep->str();
      if (separator.empty()) throw ValueError("empty separator");
      size_t pos = 0;
      while (true) {
        const size_t hit = text.find(separator, pos);
        if (hit == std::string::npos || (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split)) {
          parts.push(new_string(std::string(text.substr(pos))));
          break;
        }
        parts.push(new_string(std::string(text.substr(pos, hit - pos))));
        pos = hit + separator.size();
      }
    }
    return parts.finish();
  }

  // out += piece, refused before it would make `out` longer than a string may be.
  void append_checked(TextBuffer& out, std::string_view piece) {
    check_string_size(out.size() + piece.size());
    out.append(piece);
  }

  // ----- filters -----

  Value apply_filter(const std::string& name, const Value& x, const Args& args) {
    if (name == "default" || name == "d") {
      const Value* fallback = args.get(0, "default_value");
      const Value* boolean = args.get(1, "boolean");
      const bool use = x.kind == Kind::Undefined || (boolean != nullptr && truthy(*boolean) && !truthy(x));
      if (!use) return x;
      return fallback != nullptr ? *fallback : Value::borrowed(kNoText);
    }
    if (name == "safe") return x;
    if (name == "string") return str_of(x);
    if (name == "trim") {
      const Value text = str_of(x);
      charge(text.str().size());
      return stripped(text.str(), true, true, args.get(0, "chars"));
    }
    if (name == "upper") return new_string(ascii_upper(str_of(x).str()));
    if (name == "lower") return new_string(ascii_lower(str_of(x).str()));
    if (name == "capitalize") return new_string(capitalize(str_of(x).str()));
    if (name == "title") return new_string(title(str_of(x).str()));
    if (name == "replace") {
      const Value* count = args.get(2, "count");
      const Value* old_value = args.get(0, "old");
      const Value* new_value = args.get(1, "new");
      const Value text = str_of(x);
      const Value old_text = old_value != nullptr ? str_of(*old_value) : Value::borrowed(kNoText);
      const Value new_text = new_value != nullptr ? str_of(*new_value) : Value::borrowed(kNoText);
      charge(text.str().size());
      TextBuffer out(heap_, limits_.max_output);
      replace(text.str(), old_text.str(), new_text.str(),
              count != nullptr && count->is_integral() ? count->as_int() : -1, limits_.max_output, out);
      return new_string(out);
    }
    if (name == "length" || name == "count") {
      switch (x.kind) {
        case Kind::Undefined:
          return Value::of_int(0);
        case Kind::String:
          charge(x.str().size());
          return Value::of_int(static_cast<int64_t>(code_point_count(x.str())));
        case Kind::List:
          return Value::of_int(static_cast<int64_t>(x.list()->items.size()));
        case Kind::Dict:
          return Value::of_int(static_cast<int64_t>(x.dict()->items.size()));
        default:
          throw ValueError(fmt::format("object of type '{}' has no len()", type_name(x)));
      }
    }
    if (name == "first" || name == "last") {
      const Value list = iterate(x);
      const auto& items = list.list()->items;
      if (items.empty()) return Value::undefined(Missing::Hint, name == "first" ? kNoFirstItem : kNoLastItem);
      return name == "first" ? items.front() : items.back();
    }
    if (name == "join") {
      const Value* separator = args.get(0, "d");
      const Value* attribute = args.get(1, "attribute");
      const Value between = separator != nullptr ? str_of(*separator) : Value::borrowed(kNoText);
      const Value list = iterate(x);
      TextBuffer out(heap_, limits_.max_output);
      bool first = true;
      for (const Value& item : list.list()->items) {
        charge(1);
        if (!first) append_checked(out, between.str());
        first = false;
        append_checked(out, str_of(attribute != nullptr ? get_path(item, *attribute) : item).str());
      }
      return new_string(out);
    }
    if (name == "list") return iterate(x);
    if (name == "items") {
      if (x.kind == Kind::Undefined) return ListBuilder(heap_).finish();
      if (x.kind != Kind::Dict) throw ValueError(fmt::format("items() needs a dict, got {}", type_name(x)));
      ListBuilder items(heap_);
      items.reserve(x.dict()->items.size());
      for (const auto& [key, value] : x.dict()->items) {
        items.push(heap_.list({Value::borrowed(key, x.object), value}));
      }
      return items.finish();
    }
    if (name == "dictsort") {
      Value items = apply_filter("items", x, {});  // a new list: sorting it in place changes no one else's
      std::stable_sort(items.list()->items.begin(), items.list()->items.end(), [](const Value& a, const Value& b) {
        return ascii_less_ignoring_case(a.list()->items[0].str(), b.list()->items[0].str());
      });
      return items;
    }
    if (name == "tojson") {
      const Value* indent = args.get(0, "indent");
      const Value* ascii = args.get(99, "ensure_ascii");
      const Value* separators = args.get(99, "separators");
      const Value* sort_keys = args.get(99, "sort_keys");
      if (ascii != nullptr && truthy(*ascii)) throw ValueError("tojson(ensure_ascii=true) is not supported");
      const int indent_width = indent != nullptr && indent->is_integral()
                                   ? static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64))
                                   : -1;
      std::string item_separator = indent_width >= 0 ? "," : ", ";
      std::string key_separator = ": ";
      if (separators != nullptr && separators->kind == Kind::List && separators->list()->items.size() == 2) {
        item_separator = str_of(separators->list()->items[0]).str();
        key_separator = str_of(separators->list()->items[1]).str();
      }
      Value json = to_json(x, indent_width, item_separator, key_separator, sort_keys != nullptr && truthy(*sort_keys),
                           heap_, limits_.max_output);
      charge(json.str().size());
      return json;
    }
    if (name == "int") {
      const Value* fallback = args.get(0, "default");
      const Value otherwise = fallback != nullptr ? *fallback : Value::of_int(0);
      if (x.is_integral()) return Value::of_int(x.as_int());
      if (x.kind == Kind::Float) {
        if (!(std::fabs(x.number) < 9.2e18)) return otherwise;
        return Value::of_int(static_cast<int64_t>(x.number));
      }
      if (x.kind == Kind::String) {
        const Scratch scratch(heap_, x.str().size());  // the stripped copy strtoll reads
        const std::string text = strip(x.str(), true, true);
        errno = 0;
        char* end = nullptr;
        const long long parsed = std::strtoll(text.c_str(), &end, 10);
        if (!text.empty() && errno == 0 && end == text.c_str() + text.size()) return Value::of_int(parsed);
        const double number = std::strtod(text.c_str(), &end);
        if (!text.empty() && end == text.c_str() + text.size() && std::fabs(number) < 9.2e18) {
          return Value::of_int(static_cast<int64_t>(number));
        }
      }
      return otherwise;
    }
    if (name == "float") {
      const Value* fallback = args.get(0, "default");
      if (x.is_number()) return Value::of_float(x.as_double());
      if (x.kind == Kind::String) {
        const Scratch scratch(heap_, x.str().size());  // the stripped copy strtoll reads
        const std::string text = strip(x.str(), true, true);
        char* end = nullptr;
        const double number = std::strtod(text.c_str(), &end);
        if (!text.empty() && end == text.c_str() + text.size()) return Value::of_float(number);
      }
      return fallback != nullptr ? *fallback : Value::of_float(0);
    }
    if (name == "abs") {
      if (x.kind == Kind::Float) return Value::of_float(std::fabs(x.number));
      if (x.is_undefined()) fail_undefined(x);
      if (!x.is_integral()) throw ValueError(fmt::format("bad operand type for abs(): '{}'", type_name(x)));
      if (x.as_int() == std::numeric_limits<int64_t>::min()) throw ValueError("integer overflow");
      return Value::of_int(x.as_int() < 0 ? -x.as_int() : x.as_int());
    }
    if (name == "reverse") {
      if (x.kind == Kind::String) {
        // Each code point is copied to its mirrored place: no vector of code points.
        const std::string& s = x.str();
        charge(s.size());
        TextBuffer out(heap_, limits_.max_output);
        out.append(s.size(), '\0');
        for (size_t i = 0; i < s.size();) {
          const size_t n = code_point_length(s, i);
          std::memcpy(out.text().data() + (s.size() - i - n), s.data() + i, n);
          i += n;
        }
        return new_string(out);
      }
      const Value list = iterate(x);
      const auto& items = list.list()->items;
      charge(items.size());
      ListBuilder out(heap_);
      out.reserve(items.size());
      for (size_t i = items.size(); i-- > 0;) out.push(items[i]);
      return out.finish();
    }
    if (name == "map") {
      const Value* attribute = args.get(99, "attribute");
      const Value list = iterate(x);
      ListBuilder out(heap_);
      out.reserve(list.list()->items.size());
      for (const Value& item : list.list()->items) {
        charge(kStepWork);
        if (attribute != nullptr) {
          out.push(get_path(item, *attribute));
        } else {
          if (args.positional.empty() || args.positional[0].kind != Kind::String) {
            throw ValueError("map() needs a filter name or attribute=");
          }
          Args rest;
          rest.positional.assign(args.positional.begin() + 1, args.positional.end());
          out.push(apply_filter(args.positional[0].str(), item, rest));
        }
      }
      return out.finish();
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool by_attribute = name == "selectattr" || name == "rejectattr";
      const bool keep = name == "select" || name == "selectattr";
      size_t next = 0;
      Value attribute;
      if (by_attribute) {
        if (args.positional.empty()) throw ValueError(name + "() needs an attribute");
        attribute = args.positional[next++];
      }
      std::string test;
      if (next < args.positional.size()) {
        if (args.positional[next].kind != Kind::String) throw ValueError(name + "() test name must be a string");
        test = args.positional[next++].str();
      }
      Args test_args;
      test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
      const Value list = iterate(x);
      ListBuilder out(heap_);
      for (const Value& item : list.list()->items) {
        charge(kStepWork);
        const Value subject = by_attribute ? get_path(item, attribute) : item;
        const bool passed = test.empty() ? truthy(subject) : apply_test(test, subject, test_args);
        if (passed == keep) out.push(item);
      }
      return out.finish();
    }
    if (name == "indent") return indent(x, args);
    if (name == "round") {
      const Value* precision = args.get(0, "precision");
      if (x.is_undefined()) fail_undefined(x);
      if (!x.is_number()) throw ValueError("round() needs a number");
      const double scale = std::pow(10.0, precision != nullptr && precision->is_integral()
                                              ? static_cast<double>(std::clamp<int64_t>(precision->as_int(), -30, 30))
                                              : 0.0);
      return Value::of_float(std::round(x.as_double() * scale) / scale);
    }
    throw ValueError(fmt::format("unknown filter '{}'", name));
  }

  // Jinja's indent: every line but the first (and blank ones) gets the pad.
  // The lines are walked in place, never collected.
  Value indent(const Value& x, const Args& args) {
    const Value* width = args.get(0, "width");
    const Value* first = args.get(1, "first");
    const Value* blank = args.get(2, "blank");
    std::string pad = "    ";
    if (width != nullptr && width->kind == Kind::String) {
      pad = width->str();
    } else if (width != nullptr && width->is_integral()) {
      pad.assign(static_cast<size_t>(std::clamp<int64_t>(width->as_int(), 0, 256)), ' ');
    }
    const Value source = str_of(x);
    const std::string_view text = source.str();
    charge(text.size());
    TextBuffer out(heap_, limits_.max_output);
    size_t pos = 0;
    for (size_t i = 0; pos < text.size(); ++i) {
      const size_t end = std::min(text.find('\n', pos), text.size());
      const std::string_view line = text.substr(pos, end - pos);
      if (i > 0) append_checked(out, "\n");
      const bool pad_line =
          i == 0 ? (first != nullptr && truthy(*first)) : (!line.empty() || (blank != nullptr && truthy(*blank)));
      if (pad_line) append_checked(out, pad);
      append_checked(out, line);
      pos = end + 1;
    }
    return new_string(out);
  }

  // item.attr, or item.a.b for "a.b", or item[0] for an integer.
  Value get_path(const Value& item, const Value& path) {
    if (path.is_integral()) return get_item(item, path);
    Value current = item;
    const Value path_text = str_of(path);
    const std::string& text = path_text.str();
    size_t pos = 0;
    while (true) {
      const size_t dot = text.find('.', pos);
      const Value key = new_string(text.substr(pos, dot == std::string::npos ? dot : dot - pos));
      current = get_item(current, key);
      if (dot == std::string::npos) return current;
      pos = dot + 1;
    }
  }

  // ----- tests -----

  bool apply_test(const std::string& name, const Value& x, const Args& args) {
    const auto argument = [&]() -> const Value& {
      if (args.positional.empty()) throw ValueError(fmt::format("test '{}' needs an argument", name));
      return args.positional[0];
    };
    if (name == "defined") return x.kind != Kind::Undefined;
    if (name == "undefined") return x.kind == Kind::Undefined;
    if (name == "none") return x.kind == Kind::None;
    if (name == "boolean") return x.kind == Kind::Bool;
    if (name == "true") return x.kind == Kind::Bool && x.boolean;
    if (name == "false") return x.kind == Kind::Bool && !x.boolean;
    if (name == "integer") return x.kind == Kind::Int;
    if (name == "float") return x.kind == Kind::Float;
    if (name == "number") return x.is_number();
    if (name == "string") return x.kind == Kind::String;
    if (name == "mapping") return x.kind == Kind::Dict;
    if (name == "iterable") {
      return x.kind == Kind::List || x.kind == Kind::Dict || x.kind == Kind::String || x.kind == Kind::Undefined;
    }
    if (name == "sequence") return x.kind == Kind::List || x.kind == Kind::Dict || x.kind == Kind::String;
    if (name == "callable") return x.kind == Kind::Function || x.kind == Kind::Macro;
    if (name == "odd" || name == "even") {
      if (!x.is_integral()) throw ValueError(fmt::format("test '{}' needs an integer", name));
      return (x.as_int() % 2 != 0) == (name == "odd");
    }
    if (name == "divisibleby") {
      const Value& n = argument();
      if (!x.is_integral() || !n.is_integral()) throw ValueError("divisibleby needs integers");
      return floor_mod(x.as_int(), n.as_int()) == 0;
    }
    if (name == "eq" || name == "equalto" || name == "==") return equals(x, argument());
    if (name == "ne" || name == "!=") return !equals(x, argument());
    if (name == "lt" || name == "lessthan" || name == "<") return compare(x, argument()) < 0;
    if (name == "le" || name == "<=") return compare(x, argument()) <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return compare(x, argument()) > 0;
    if (name == "ge" || name == ">=") return compare(x, argument()) >= 0;
    if (name == "in") return contains(argument(), x);
    if (name == "sameas") {
      const Value& other = argument();
      if (x.kind != other.kind) return false;
      if (x.kind == Kind::List || x.kind == Kind::Dict || x.kind == Kind::Namespace) return x.object == other.object;
      return equals(x, other);
    }
    if (name == "lower") return x.kind == Kind::String && !has_ascii_in_range(x.str(), 'A', 'Z');
    if (name == "upper") return x.kind == Kind::String && !has_ascii_in_range(x.str(), 'a', 'z');
    throw ValueError(fmt::format("unknown test '{}'", name));
  }

  const std::string& where_;
  const Limits& limits_;
  Heap& heap_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  size_t floor_ = 1;
  TextBuffer* out_ = nullptr;
  int call_depth_ = 0;
};

}  // namespace

Template::Template(std::string_view source, std::string where) : where_(std::move(where)) {
  body_ = parse(tokenize(source, where_), where_);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& variables, const Limits& limits, RenderStats* stats) const {
  Heap heap(limits);
  // Runs after the renderer's values are gone, whether the render succeeded
  // or threw: empties the namespaces (breaking cycles) and reports.
  struct Report {
    Heap& heap;
    RenderStats* stats;
    ~Report() {
      heap.collect();
      if (stats != nullptr) *stats = heap.stats();
    }
  } report{heap, stats};
  Renderer renderer(where_, limits, heap);
  try {
    return renderer.run(body_, variables);
  } catch (const ValueError& error) {
    // Raised outside any statement (reading the variables): no line to name.
    throw Error(fmt::format("{}: {}", where_, error.what()));
  }
}

}  // namespace titan::data::jinja
