#include "titan/data/jinja/jinja_interpreter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_map>

#include "titan/core/error.h"
#include "titan/data/jinja/jinja_lexer.h"
#include "titan/data/jinja/jinja_parser.h"
#include "titan/data/jinja/jinja_value.h"

namespace titan::data::jinja {

namespace {

using Kind = Value::Kind;

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
  bool word_start = true;
  for (const char c : s) {
    const bool separator = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '-' ||
                           c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      out += c;
      word_start = true;
    } else {
      out += word_start ? ascii_upper(std::string(1, c)) : ascii_lower(std::string(1, c));
      word_start = false;
    }
  }
  return out;
}

// Python's str.replace, including the empty `old` (insert between code points).
std::string replace(const std::string& s, const std::string& old, const std::string& replacement, int64_t count) {
  std::string out;
  if (old.empty()) {
    int64_t done = 0;
    for (const std::string_view cp : code_points(s)) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      out += cp;
    }
    if (count < 0 || done < count) out += replacement;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += replacement;
    pos = hit + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Python's slice.indices for a sequence of `length` items, as explicit positions.
std::vector<int64_t> slice_positions(int64_t length, const Value& start_v, const Value& stop_v, const Value& step_v) {
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
  const int64_t start = clamp(as_index(start_v, "start"), 0, length - 1);
  const int64_t stop = clamp(as_index(stop_v, "stop"), length, -1);
  std::vector<int64_t> positions;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) {
      positions.push_back(i);
      if (step > length) break;
    }
  } else {
    for (int64_t i = start; i > stop; i += step) {
      positions.push_back(i);
      if (step < -length) break;
    }
  }
  return positions;
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

class Renderer {
 public:
  Renderer(const std::string& where, const Limits& limits) : where_(where), limits_(limits) {}

  std::string run(const Body& body, const nlohmann::ordered_json& variables) {
    scopes_.emplace_back();  // 0: built-in functions
    for (const char* name : {"range", "namespace", "raise_exception", "strftime_now", "dict"}) {
      Value function = Value::make(Kind::Function);
      function.string = name;
      scopes_[0][name] = function;
    }
    scopes_.emplace_back();  // 1: the template's variables and top-level sets
    if (variables.is_object()) {
      for (const auto& [key, item] : variables.items()) scopes_[1][key] = from_json(item, 0);
    }
    floor_ = 1;
    std::string out;
    out_ = &out;
    exec_body(body);
    return out;
  }

 private:
  enum class Flow { Normal, Break, Continue };

  [[noreturn]] void fail(int line, const std::string& message) const { fail_at(where_, line, message); }

  void charge(size_t amount) {
    work_ += amount;
    if (work_ > limits_.max_work) {
      throw ValueError(fmt::format("the template does too much work (over {} steps)", limits_.max_work));
    }
  }

  Value new_list(std::vector<Value> items = {}) {
    charge(items.size() + 1);
    lists_.emplace_back();
    lists_.back().items = std::move(items);
    Value v = Value::make(Kind::List);
    v.list = &lists_.back();
    return v;
  }
  Value new_dict(Kind kind = Kind::Dict) {
    charge(1);
    dicts_.emplace_back();
    Value v = Value::make(kind);
    v.dict = &dicts_.back();
    return v;
  }
  Value new_string(std::string s) {
    charge(s.size() + 1);
    if (s.size() > limits_.max_output) {
      throw ValueError(fmt::format("a string exceeds the output limit of {} bytes", limits_.max_output));
    }
    return Value::of_string(std::move(s));
  }

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
        return Value::of_string(json.get<std::string>());
      case nlohmann::ordered_json::value_t::array: {
        std::vector<Value> items;
        for (const auto& item : json) items.push_back(from_json(item, depth + 1));
        return new_list(std::move(items));
      }
      case nlohmann::ordered_json::value_t::object: {
        Value dict = new_dict();
        for (const auto& [key, item] : json.items()) dict.dict->set(key, from_json(item, depth + 1));
        return dict;
      }
      default:
        return Value();
    }
  }

  void emit(const std::string& text) {
    if (out_->size() + text.size() > limits_.max_output) {
      throw ValueError(fmt::format("the output exceeds the limit of {} bytes", limits_.max_output));
    }
    charge(text.size());
    out_->append(text);
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
    charge(1);
    switch (node.kind) {
      case Node::Kind::Text:
        emit(node.text);
        return Flow::Normal;
      case Node::Kind::Output: {
        const Value value = eval(*node.exprs[0]);
        emit(to_str(value));
        return Flow::Normal;
      }
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
          target->dict->set(node.attr, std::move(value));
        } else if (node.targets.size() == 1) {
          assign(node.targets[0], std::move(value));
        } else {
          const std::vector<Value> parts = unpack(value, node.targets.size());
          for (size_t i = 0; i < parts.size(); ++i) assign(node.targets[i], parts[i]);
        }
        return Flow::Normal;
      }
      case Node::Kind::SetBlock: {
        std::string captured;
        std::string* saved = out_;
        out_ = &captured;
        try {
          exec_body(node.bodies[0]);
        } catch (...) {
          out_ = saved;
          throw;
        }
        out_ = saved;
        assign(node.targets[0], new_string(std::move(captured)));
        return Flow::Normal;
      }
      case Node::Kind::Macro: {
        Value macro = Value::make(Kind::Macro);
        macro.macro = &node;
        macro.string = node.text;
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
    if (value.list->items.size() != count) {
      throw ValueError(fmt::format("expected {} values to unpack, got {}", count, value.list->items.size()));
    }
    return value.list->items;
  }

  // The items a for loop or a filter walks: a list's items, a dict's keys, a string's code points.
  std::vector<Value> iterate(const Value& value) {
    switch (value.kind) {
      case Kind::Undefined:
        return {};
      case Kind::List:
        return value.list->items;
      case Kind::Dict: {
        std::vector<Value> keys;
        for (const auto& entry : value.dict->items) keys.push_back(Value::of_string(entry.first));
        return keys;
      }
      case Kind::String: {
        std::vector<Value> chars;
        for (const std::string_view cp : code_points(value.string)) chars.push_back(Value::of_string(std::string(cp)));
        charge(chars.size());
        return chars;
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

  void exec_for(const Node& node) {
    const std::vector<Value> all = iterate(eval(*node.exprs[0]));
    scopes_.emplace_back();
    struct PopScope {
      ~PopScope() { scopes.pop_back(); }
      std::vector<std::unordered_map<std::string, Value>>& scopes;
    } pop{scopes_};
    // `for x in xs if cond` filters first: loop.length and loop.last count the kept items.
    std::vector<Value> items;
    if (node.exprs.size() > 1) {
      for (const Value& item : all) {
        charge(1);
        bind_targets(node, item);
        if (truthy(eval(*node.exprs[1]))) items.push_back(item);
      }
    } else {
      items = all;
    }
    if (items.empty()) {
      exec_body(node.bodies[1]);
      return;
    }
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      charge(1);
      Value loop = new_dict();
      Dict& d = *loop.dict;
      d.items.reserve(10);
      d.items.emplace_back("index", Value::of_int(i + 1));
      d.items.emplace_back("index0", Value::of_int(i));
      d.items.emplace_back("revindex", Value::of_int(length - i));
      d.items.emplace_back("revindex0", Value::of_int(length - i - 1));
      d.items.emplace_back("first", Value::of_bool(i == 0));
      d.items.emplace_back("last", Value::of_bool(i == length - 1));
      d.items.emplace_back("length", Value::of_int(length));
      d.items.emplace_back("depth", Value::of_int(1));
      d.items.emplace_back("depth0", Value::of_int(0));
      if (i > 0) d.items.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < length) d.items.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
      assign("loop", loop);
      bind_targets(node, items[static_cast<size_t>(i)]);
      if (exec_body(node.bodies[0]) == Flow::Break) break;
    }
  }

  // ----- expressions -----

  Value eval(const Expr& expr) {
    try {
      charge(1);
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
        return Value::of_string(expr.name);
      case Expr::Kind::Name: {
        const Value* value = lookup(expr.name);
        return value == nullptr ? Value() : *value;
      }
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        std::vector<Value> items;
        for (const auto& arg : expr.args) items.push_back(eval(*arg));
        return new_list(std::move(items));
      }
      case Expr::Kind::Dict: {
        Value dict = new_dict();
        for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
          const Value key = eval(*expr.args[i]);
          if (key.kind != Kind::String) throw ValueError("dict keys must be strings");
          dict.dict->set(key.string, eval(*expr.args[i + 1]));
        }
        return dict;
      }
      case Expr::Kind::Attr:
        return get_attr(eval(*expr.args[0]), expr.name);
      case Expr::Kind::Item:
        return get_item(eval(*expr.args[0]), eval(*expr.args[1]));
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
        return expr.args[2] ? eval(*expr.args[2]) : Value();
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

  Value get_attr(const Value& target, const std::string& name) {
    if (target.kind == Kind::Dict || target.kind == Kind::Namespace) {
      const Value* found = target.dict->find(name);
      return found == nullptr ? Value() : *found;
    }
    return Value();
  }

  Value get_item(const Value& target, const Value& key) {
    switch (target.kind) {
      case Kind::Dict:
      case Kind::Namespace: {
        if (key.kind != Kind::String) return Value();
        const Value* found = target.dict->find(key.string);
        return found == nullptr ? Value() : *found;
      }
      case Kind::List: {
        if (!key.is_integral()) return Value();
        const auto size = static_cast<int64_t>(target.list->items.size());
        int64_t index = key.as_int();
        if (index < 0) index += size;
        if (index < 0 || index >= size) return Value();
        return target.list->items[static_cast<size_t>(index)];
      }
      case Kind::String: {
        if (!key.is_integral()) return Value();
        const std::vector<std::string_view> cps = code_points(target.string);
        const auto size = static_cast<int64_t>(cps.size());
        int64_t index = key.as_int();
        if (index < 0) index += size;
        if (index < 0 || index >= size) return Value();
        return Value::of_string(std::string(cps[static_cast<size_t>(index)]));
      }
      default:
        return Value();
    }
  }

  Value slice(const Value& target, const Value& start, const Value& stop, const Value& step) {
    if (target.kind == Kind::List) {
      const auto& items = target.list->items;
      std::vector<Value> out;
      for (const int64_t i : slice_positions(static_cast<int64_t>(items.size()), start, stop, step)) {
        out.push_back(items[static_cast<size_t>(i)]);
      }
      return new_list(std::move(out));
    }
    if (target.kind == Kind::String) {
      const std::vector<std::string_view> cps = code_points(target.string);
      std::string out;
      for (const int64_t i : slice_positions(static_cast<int64_t>(cps.size()), start, stop, step)) {
        out += cps[static_cast<size_t>(i)];
      }
      return new_string(std::move(out));
    }
    if (target.kind == Kind::Undefined) return Value();
    throw ValueError(fmt::format("'{}' object is not subscriptable", type_name(target)));
  }

  Value eval_unary(const std::string& op, const Value& operand) {
    if (op == "not") return Value::of_bool(!truthy(operand));
    if (!operand.is_number())
      throw ValueError(fmt::format("bad operand type for unary {}: '{}'", op, type_name(operand)));
    if (op == "+") return operand.kind == Kind::Bool ? Value::of_int(operand.as_int()) : operand;
    if (operand.kind == Kind::Float) return Value::of_float(-operand.number);
    return Value::of_int(checked_sub(int64_t{0}, operand.as_int()));
  }

  Value repeat(const Value& sequence, int64_t times) {
    const size_t n = times < 0 ? 0 : static_cast<size_t>(times);
    if (sequence.kind == Kind::String) {
      if (n != 0 && sequence.string.size() > limits_.max_output / n) {
        throw ValueError(fmt::format("a string exceeds the output limit of {} bytes", limits_.max_output));
      }
      std::string out;
      for (size_t i = 0; i < n; ++i) out += sequence.string;
      return new_string(std::move(out));
    }
    const auto& items = sequence.list->items;
    if (n != 0 && items.size() > limits_.max_work / n) throw ValueError("the list is too large");
    charge(items.size() * n);
    std::vector<Value> out;
    for (size_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
    return new_list(std::move(out));
  }

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Value::of_bool(equals(a, b));
    if (op == "!=") return Value::of_bool(!equals(a, b));
    if (op == "<") return Value::of_bool(compare(a, b) < 0);
    if (op == ">") return Value::of_bool(compare(a, b) > 0);
    if (op == "<=") return Value::of_bool(compare(a, b) <= 0);
    if (op == ">=") return Value::of_bool(compare(a, b) >= 0);
    if (op == "in") return Value::of_bool(contains(b, a));
    if (op == "not in") return Value::of_bool(!contains(b, a));
    if (op == "~") return new_string(to_str(a) + to_str(b));
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
      if (a.kind == Kind::String && b.kind == Kind::String) return new_string(a.string + b.string);
      if (a.kind == Kind::List && b.kind == Kind::List) {
        std::vector<Value> items = a.list->items;
        items.insert(items.end(), b.list->items.begin(), b.list->items.end());
        return new_list(std::move(items));
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
        return container.string.find(item.string) != std::string::npos;
      case Kind::List:
        for (const Value& candidate : container.list->items) {
          charge(1);
          if (equals(candidate, item)) return true;
        }
        return false;
      case Kind::Dict:
        return item.kind == Kind::String && container.dict->find(item.string) != nullptr;
      default:
        throw ValueError(fmt::format("argument of type '{}' is not iterable", type_name(container)));
    }
  }

  // ----- calls -----

  Value eval_call(const Expr& expr) {
    const Expr& callee = *expr.args[0];
    if (callee.kind == Expr::Kind::Attr) {
      const Value target = eval(*callee.args[0]);
      Value result;
      if (call_method(target, callee.name, expr, result)) return result;
      const Value function = get_attr(target, callee.name);
      if (function.kind == Kind::Undefined) {
        throw ValueError(fmt::format("'{}' has no method or callable attribute '{}'", type_name(target), callee.name));
      }
      return call_value(function, eval_args(expr, 1), callee.name);
    }
    const Value function = eval(callee);
    const std::string name = callee.kind == Expr::Kind::Name ? callee.name : "the value";
    if (function.kind == Kind::Undefined) throw ValueError(fmt::format("'{}' is undefined", name));
    return call_value(function, eval_args(expr, 1), name);
  }

  Value call_value(const Value& function, const Args& args, const std::string& name) {
    if (function.kind == Kind::Macro) return call_macro(*function.macro, args);
    if (function.kind == Kind::Function) return call_builtin(function.string, args);
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
    std::string captured;
    std::string* saved_out = out_;
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
          assign(macro.targets[i], Value());
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
    return new_string(std::move(captured));
  }

  Value call_builtin(const std::string& name, const Args& args) {
    if (name == "raise_exception") {
      const Value* message = args.get(0, "message");
      throw ValueError(message == nullptr ? std::string("raise_exception() called") : to_str(*message));
    }
    if (name == "range") {
      std::vector<int64_t> bounds;
      for (const Value& arg : args.positional) {
        if (!arg.is_integral()) throw ValueError("range() arguments must be integers");
        bounds.push_back(arg.as_int());
      }
      if (bounds.empty() || bounds.size() > 3) throw ValueError("range() takes 1 to 3 arguments");
      const int64_t start = bounds.size() == 1 ? 0 : bounds[0];
      const int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
      const int64_t step = bounds.size() == 3 ? bounds[2] : 1;
      if (step == 0) throw ValueError("range() step must not be zero");
      std::vector<Value> items;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        charge(1);
        items.push_back(Value::of_int(i));
        if (__builtin_add_overflow(i, step, &i)) break;
      }
      return new_list(std::move(items));
    }
    if (name == "namespace" || name == "dict") {
      Value result = new_dict(name == "namespace" ? Kind::Namespace : Kind::Dict);
      if (!args.positional.empty()) {
        const Value& source = args.positional[0];
        if (args.positional.size() > 1 || source.kind != Kind::Dict) {
          throw ValueError(name + "() takes at most one dict and keyword arguments");
        }
        for (const auto& [key, value] : source.dict->items) result.dict->set(key, value);
      }
      for (const auto& [key, value] : args.keyword) result.dict->set(key, value);
      return result;
    }
    if (name == "strftime_now") {
      const Value* format = args.get(0, "format");
      if (format == nullptr || format->kind != Kind::String) throw ValueError("strftime_now() needs a format string");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buffer[256];
      const size_t n = std::strftime(buffer, sizeof(buffer), format->string.c_str(), &local);
      return Value::of_string(std::string(buffer, n));
    }
    throw ValueError(fmt::format("'{}' is not callable", name));
  }

  std::string string_arg(const Args& args, size_t index, std::string_view name, const char* function) {
    const Value* value = args.get(index, name);
    if (value == nullptr || value->kind != Kind::String) {
      throw ValueError(fmt::format("{}() argument '{}' must be a string", function, name));
    }
    return value->string;
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
      result = string_method(target.string, name, args);
      return true;
    }
    if (target.kind == Kind::Dict) {
      if (name != "get" && name != "items" && name != "keys" && name != "values") return false;
      const Args args = eval_args(expr, 1);
      if (name == "get") {
        const Value* key = args.get(0, "key");
        if (key == nullptr) throw ValueError("get() needs a key");
        const Value* found = key->kind == Kind::String ? target.dict->find(key->string) : nullptr;
        const Value* fallback = args.get(1, "default");
        result = found != nullptr ? *found : fallback != nullptr ? *fallback : Value::none();
      } else {
        std::vector<Value> items;
        for (const auto& [key, value] : target.dict->items) {
          if (name == "keys") {
            items.push_back(Value::of_string(key));
          } else if (name == "values") {
            items.push_back(value);
          } else {
            items.push_back(new_list({Value::of_string(key), value}));
          }
        }
        result = new_list(std::move(items));
      }
      return true;
    }
    return false;
  }

  Value string_method(const std::string& s, const std::string& name, const Args& args) {
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value* chars = args.get(0, "chars");
      const std::string* set = chars != nullptr && chars->kind == Kind::String ? &chars->string : nullptr;
      return new_string(strip(s, name != "rstrip", name != "lstrip", set));
    }
    if (name == "upper") return new_string(ascii_upper(s));
    if (name == "lower") return new_string(ascii_lower(s));
    if (name == "title") return new_string(title(s));
    if (name == "capitalize") return new_string(capitalize(s));
    if (name == "startswith" || name == "endswith") {
      const Value* pattern = args.get(0, "prefix");
      if (pattern == nullptr) throw ValueError(name + "() needs an argument");
      std::vector<Value> candidates;
      if (pattern->kind == Kind::List) {
        candidates = pattern->list->items;
      } else {
        candidates.push_back(*pattern);
      }
      for (const Value& candidate : candidates) {
        if (candidate.kind != Kind::String) throw ValueError(name + "() arguments must be strings");
        const std::string& p = candidate.string;
        const bool hit =
            p.size() <= s.size() &&
            (name == "startswith" ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
        if (hit) return Value::of_bool(true);
      }
      return Value::of_bool(false);
    }
    if (name == "split") {
      const Value* sep = args.get(0, "sep");
      const Value* max_value = args.get(1, "maxsplit");
      const int64_t max_split = max_value != nullptr && max_value->is_integral() ? max_value->as_int() : -1;
      std::vector<Value> parts;
      if (sep == nullptr || sep->kind == Kind::None) {
        const std::vector<std::string_view> cps = code_points(s);
        size_t i = 0;
        while (i < cps.size()) {
          while (i < cps.size() && is_python_space(cps[i])) ++i;
          if (i >= cps.size()) break;
          if (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) {
            std::string rest;
            for (size_t k = i; k < cps.size(); ++k) rest += cps[k];
            parts.push_back(Value::of_string(strip(rest, false, true)));
            break;
          }
          std::string word;
          while (i < cps.size() && !is_python_space(cps[i])) word += cps[i++];
          parts.push_back(Value::of_string(std::move(word)));
        }
      } else {
        if (sep->kind != Kind::String) throw ValueError("split() separator must be a string or none");
        if (sep->string.empty()) throw ValueError("empty separator");
        size_t pos = 0;
        while (true) {
          const size_t hit = s.find(sep->string, pos);
          if (hit == std::string::npos || (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split)) {
            parts.push_back(Value::of_string(s.substr(pos)));
            break;
          }
          parts.push_back(Value::of_string(s.substr(pos, hit - pos)));
          pos = hit + sep->string.size();
        }
      }
      charge(s.size());
      return new_list(std::move(parts));
    }
    if (name == "replace") {
      const Value* count = args.get(2, "count");
      return new_string(replace(s, string_arg(args, 0, "old", "replace"), string_arg(args, 1, "new", "replace"),
                                count != nullptr && count->is_integral() ? count->as_int() : -1));
    }
    if (name == "join") {
      const Value* items = args.get(0, "iterable");
      if (items == nullptr) throw ValueError("join() needs an iterable");
      std::string out;
      bool first = true;
      for (const Value& item : iterate(*items)) {
        if (item.kind != Kind::String) throw ValueError("join() items must be strings");
        if (!first) out += s;
        first = false;
        out += item.string;
        if (out.size() > limits_.max_output) throw ValueError("a joined string exceeds the output limit");
      }
      return new_string(std::move(out));
    }
    if (name == "find") {
      const size_t hit = s.find(string_arg(args, 0, "sub", "find"));
      return Value::of_int(hit == std::string::npos ? -1 : static_cast<int64_t>(code_point_count(s.substr(0, hit))));
    }
    // count
    const std::string sub = string_arg(args, 0, "sub", "count");
    if (sub.empty()) return Value::of_int(static_cast<int64_t>(code_point_count(s)) + 1);
    int64_t count = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++count;
    return Value::of_int(count);
  }

  // ----- filters -----

  Value apply_filter(const std::string& name, const Value& x, const Args& args) {
    if (name == "default" || name == "d") {
      const Value* fallback = args.get(0, "default_value");
      const Value* boolean = args.get(1, "boolean");
      const bool use = x.kind == Kind::Undefined || (boolean != nullptr && truthy(*boolean) && !truthy(x));
      if (!use) return x;
      return fallback != nullptr ? *fallback : Value::of_string("");
    }
    if (name == "safe") return x;
    if (name == "string") return new_string(to_str(x));
    if (name == "trim") {
      const Value* chars = args.get(0, "chars");
      const std::string* set = chars != nullptr && chars->kind == Kind::String ? &chars->string : nullptr;
      return new_string(strip(to_str(x), true, true, set));
    }
    if (name == "upper") return new_string(ascii_upper(to_str(x)));
    if (name == "lower") return new_string(ascii_lower(to_str(x)));
    if (name == "capitalize") return new_string(capitalize(to_str(x)));
    if (name == "title") return new_string(title(to_str(x)));
    if (name == "replace") {
      const Value* count = args.get(2, "count");
      return new_string(replace(to_str(x), to_str(args.get(0, "old") ? *args.get(0, "old") : Value()),
                                to_str(args.get(1, "new") ? *args.get(1, "new") : Value()),
                                count != nullptr && count->is_integral() ? count->as_int() : -1));
    }
    if (name == "length" || name == "count") {
      switch (x.kind) {
        case Kind::Undefined:
          return Value::of_int(0);
        case Kind::String:
          return Value::of_int(static_cast<int64_t>(code_point_count(x.string)));
        case Kind::List:
          return Value::of_int(static_cast<int64_t>(x.list->items.size()));
        case Kind::Dict:
          return Value::of_int(static_cast<int64_t>(x.dict->items.size()));
        default:
          throw ValueError(fmt::format("object of type '{}' has no len()", type_name(x)));
      }
    }
    if (name == "first" || name == "last") {
      const std::vector<Value> items = iterate(x);
      if (items.empty()) return Value();
      return name == "first" ? items.front() : items.back();
    }
    if (name == "join") {
      const Value* separator = args.get(0, "d");
      const Value* attribute = args.get(1, "attribute");
      std::string out;
      bool first = true;
      for (const Value& item : iterate(x)) {
        if (!first) out += separator != nullptr ? to_str(*separator) : "";
        first = false;
        out += to_str(attribute != nullptr ? get_path(item, *attribute) : item);
        if (out.size() > limits_.max_output) throw ValueError("a joined string exceeds the output limit");
      }
      return new_string(std::move(out));
    }
    if (name == "list") return new_list(iterate(x));
    if (name == "items") {
      if (x.kind == Kind::Undefined) return new_list();
      if (x.kind != Kind::Dict) throw ValueError(fmt::format("items() needs a dict, got {}", type_name(x)));
      std::vector<Value> items;
      for (const auto& [key, value] : x.dict->items) items.push_back(new_list({Value::of_string(key), value}));
      return new_list(std::move(items));
    }
    if (name == "dictsort") {
      Value items = apply_filter("items", x, {});
      std::stable_sort(items.list->items.begin(), items.list->items.end(), [](const Value& a, const Value& b) {
        return ascii_lower(a.list->items[0].string) < ascii_lower(b.list->items[0].string);
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
      if (separators != nullptr && separators->kind == Kind::List && separators->list->items.size() == 2) {
        item_separator = to_str(separators->list->items[0]);
        key_separator = to_str(separators->list->items[1]);
      }
      return new_string(
          to_json(x, indent_width, item_separator, key_separator, sort_keys != nullptr && truthy(*sort_keys)));
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
        const std::string text = strip(x.string, true, true);
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
        const std::string text = strip(x.string, true, true);
        char* end = nullptr;
        const double number = std::strtod(text.c_str(), &end);
        if (!text.empty() && end == text.c_str() + text.size()) return Value::of_float(number);
      }
      return fallback != nullptr ? *fallback : Value::of_float(0);
    }
    if (name == "abs") {
      if (x.kind == Kind::Float) return Value::of_float(std::fabs(x.number));
      if (!x.is_integral()) throw ValueError(fmt::format("bad operand type for abs(): '{}'", type_name(x)));
      if (x.as_int() == std::numeric_limits<int64_t>::min()) throw ValueError("integer overflow");
      return Value::of_int(x.as_int() < 0 ? -x.as_int() : x.as_int());
    }
    if (name == "reverse") {
      if (x.kind == Kind::String) {
        std::vector<std::string_view> cps = code_points(x.string);
        std::string out;
        for (size_t i = cps.size(); i-- > 0;) out += cps[i];
        return new_string(std::move(out));
      }
      std::vector<Value> items = iterate(x);
      std::reverse(items.begin(), items.end());
      return new_list(std::move(items));
    }
    if (name == "map") {
      const Value* attribute = args.get(99, "attribute");
      std::vector<Value> out;
      for (const Value& item : iterate(x)) {
        charge(1);
        if (attribute != nullptr) {
          out.push_back(get_path(item, *attribute));
        } else {
          if (args.positional.empty() || args.positional[0].kind != Kind::String) {
            throw ValueError("map() needs a filter name or attribute=");
          }
          Args rest;
          rest.positional.assign(args.positional.begin() + 1, args.positional.end());
          out.push_back(apply_filter(args.positional[0].string, item, rest));
        }
      }
      return new_list(std::move(out));
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
        test = args.positional[next++].string;
      }
      Args test_args;
      test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
      std::vector<Value> out;
      for (const Value& item : iterate(x)) {
        charge(1);
        const Value subject = by_attribute ? get_path(item, attribute) : item;
        const bool passed = test.empty() ? truthy(subject) : apply_test(test, subject, test_args);
        if (passed == keep) out.push_back(item);
      }
      return new_list(std::move(out));
    }
    if (name == "indent") {
      const Value* width = args.get(0, "width");
      const Value* first = args.get(1, "first");
      const Value* blank = args.get(2, "blank");
      std::string pad = "    ";
      if (width != nullptr && width->kind == Kind::String) {
        pad = width->string;
      } else if (width != nullptr && width->is_integral()) {
        pad.assign(static_cast<size_t>(std::clamp<int64_t>(width->as_int(), 0, 256)), ' ');
      }
      std::vector<std::string> lines;
      const std::string text = to_str(x);
      size_t pos = 0;
      while (pos <= text.size()) {
        const size_t end = text.find('\n', pos);
        if (end == std::string::npos) {
          if (pos < text.size()) lines.push_back(text.substr(pos));
          break;
        }
        lines.push_back(text.substr(pos, end - pos));
        pos = end + 1;
      }
      std::string out;
      for (size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) out += '\n';
        const bool pad_line =
            i == 0 ? (first != nullptr && truthy(*first)) : (!lines[i].empty() || (blank != nullptr && truthy(*blank)));
        if (pad_line) out += pad;
        out += lines[i];
        if (out.size() > limits_.max_output) throw ValueError("an indented string exceeds the output limit");
      }
      return new_string(std::move(out));
    }
    if (name == "round") {
      const Value* precision = args.get(0, "precision");
      if (!x.is_number()) throw ValueError("round() needs a number");
      const double scale = std::pow(10.0, precision != nullptr && precision->is_integral()
                                              ? static_cast<double>(std::clamp<int64_t>(precision->as_int(), -30, 30))
                                              : 0.0);
      return Value::of_float(std::round(x.as_double() * scale) / scale);
    }
    throw ValueError(fmt::format("unknown filter '{}'", name));
  }

  // item.attr, or item.a.b for "a.b", or item[0] for an integer.
  Value get_path(const Value& item, const Value& path) {
    if (path.is_integral()) return get_item(item, path);
    Value current = item;
    const std::string text = to_str(path);
    size_t pos = 0;
    while (true) {
      const size_t dot = text.find('.', pos);
      current = get_item(current, Value::of_string(text.substr(pos, dot == std::string::npos ? dot : dot - pos)));
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
      if (x.kind == Kind::List) return x.list == other.list;
      if (x.kind == Kind::Dict || x.kind == Kind::Namespace) return x.dict == other.dict;
      return equals(x, other);
    }
    if (name == "lower") return x.kind == Kind::String && ascii_lower(x.string) == x.string;
    if (name == "upper") return x.kind == Kind::String && ascii_upper(x.string) == x.string;
    throw ValueError(fmt::format("unknown test '{}'", name));
  }

  const std::string& where_;
  const Limits& limits_;
  std::deque<List> lists_;
  std::deque<Dict> dicts_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  size_t floor_ = 1;
  std::string* out_ = nullptr;
  size_t work_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Template::Template(std::string_view source, std::string where) : where_(std::move(where)) {
  body_ = parse(tokenize(source, where_), where_);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& variables, const Limits& limits) const {
  Renderer renderer(where_, limits);
  try {
    return renderer.run(body_, variables);
  } catch (const ValueError& error) {
    // Raised outside any statement (reading the variables): no line to name.
    throw Error(fmt::format("{}: {}", where_, error.what()));
  }
}

}  // namespace titan::data::jinja
