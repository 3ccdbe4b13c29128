// The Renderer's calls: macros, the built-in functions (range, namespace,
// dict, raise_exception, strftime_now), and Python's str and dict methods.
#include "titan/data/jinja/jinja_renderer.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <iterator>
#include <limits>

namespace titan::data::jinja::detail {

Value Renderer::eval_call(const Expr& expr) {
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

Value Renderer::call_value(const Value& function, const Args& args, const std::string& name) {
  if (function.kind == Kind::Macro) return call_macro(*function.macro, args);
  if (function.kind == Kind::Function) return call_builtin(function.str(), args);
  throw ValueError(fmt::format("'{}' ({}) is not callable", name, type_name(function)));
}

Value Renderer::call_macro(const Node& macro, const Args& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    throw ValueError(fmt::format("macros nest deeper than {} calls", limits_.max_call_depth));
  }
  if (args.positional.size() > macro.targets.size()) {
    throw ValueError(
        fmt::format("macro '{}' takes {} arguments, got {}", macro.text, macro.targets.size(), args.positional.size()));
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

Value Renderer::call_builtin(const std::string& name, const Args& args) {
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

const std::string& Renderer::string_arg(const Args& args, size_t index, std::string_view name, const char* function) {
  const Value* value = args.get(index, name);
  if (value == nullptr || value->kind != Kind::String) {
    throw ValueError(fmt::format("{}() argument '{}' must be a string", function, name));
  }
  return value->str();
}

// Python's str and dict methods; true when `name` is one.
bool Renderer::call_method(const Value& target, const std::string& name, const Expr& expr, Value& result) {
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

Value Renderer::string_method(const std::string& s, const std::string& name, const Args& args) {
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
      return p.size() <= s.size() &&
             (name == "startswith" ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
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

Value Renderer::split(const std::string& s, const Args& args) {
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
void Renderer::append_checked(TextBuffer& out, std::string_view piece) {
  check_string_size(out.size() + piece.size());
  out.append(piece);
}

}  // namespace titan::data::jinja::detail
