// The Renderer's expressions: literals, names, attributes, items and slices,
// and the unary and binary operators with Python's semantics.
#include "titan/data/jinja/jinja_renderer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace titan::data::jinja::detail {

Value Renderer::eval(const Expr& expr) {
  try {
    charge(kStepWork);
    return eval_expr(expr);
  } catch (const ValueError& error) {
    fail(expr.line, error.what());
  }
}

Value Renderer::eval_expr(const Expr& expr) {
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
      return hint(fmt::format("the inline if-expression on line {} evaluated to false and no else section was defined.",
                              expr.line));
  }
  return Value();
}

Args Renderer::eval_args(const Expr& expr, size_t first) {
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
Value Renderer::hint(std::string text) {
  const Value owner = new_string(std::move(text));
  return Value::undefined(Missing::Hint, owner.str(), owner.object);
}

// target.name. As in jinja2, a missing attribute is undefined, but looking
// inside an undefined value is an error that says how it came about.
// `name` lives in the template or in `name_owner`.
Value Renderer::get_attr(const Value& target, const std::string& name, Object* name_owner) {
  if (target.is_undefined()) fail_undefined(target);
  if (target.kind == Kind::Dict || target.kind == Kind::Namespace) {
    const Value* found = target.dict()->find(name);
    if (found != nullptr) return *found;
  }
  Value missing = Value::undefined(Missing::Attribute, name, name_owner);
  missing.missing_on = target.kind;
  return missing;
}

Value Renderer::get_item(const Value& target, const Value& key) {
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
Value Renderer::missing_item(const Value& target, const Value& key) {
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

Value Renderer::slice(const Value& target, const Value& start, const Value& stop, const Value& step) {
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
Value Renderer::slice_string(const std::string& s, const Value& start, const Value& stop, const Value& step) {
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

Value Renderer::eval_unary(const std::string& op, const Value& operand) {
  if (op == "not") return Value::of_bool(!truthy(operand));
  if (operand.is_undefined()) fail_undefined(operand);
  if (!operand.is_number())
    throw ValueError(fmt::format("bad operand type for unary {}: '{}'", op, type_name(operand)));
  if (op == "+") return operand.kind == Kind::Bool ? Value::of_int(operand.as_int()) : operand;
  if (operand.kind == Kind::Float) return Value::of_float(-operand.number);
  return Value::of_int(checked_sub(int64_t{0}, operand.as_int()));
}

Value Renderer::repeat(const Value& sequence, int64_t times) {
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
Value Renderer::concat(const Value& a, const Value& b) {
  const Value x = str_of(a);
  const Value y = str_of(b);
  check_string_size(x.str().size() + y.str().size());
  TextBuffer out(heap_, limits_.max_output);
  out.reserve(x.str().size() + y.str().size());
  out.append(x.str());
  out.append(y.str());
  return new_string(out);
}

Value Renderer::binary(const std::string& op, const Value& a, const Value& b) {
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
    throw ValueError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
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

bool Renderer::contains(const Value& container, const Value& item) {
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

}  // namespace titan::data::jinja::detail
