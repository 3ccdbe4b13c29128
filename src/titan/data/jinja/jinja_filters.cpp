// The Renderer's filters (`x | name(...)`) and tests (`x is name`): the two
// tables of named functions a template applies to a value.
#include "titan/data/jinja/jinja_renderer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace titan::data::jinja::detail {

namespace {

// jinja2's hints for the undefined values it makes itself.
const std::string kNoFirstItem = "No first item, sequence was empty.";
const std::string kNoLastItem = "No last item, sequence was empty.";

}  // namespace

Value Renderer::apply_filter(const std::string& name, const Value& x, const Args& args) {
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
    replace(text.str(), old_text.str(), new_text.str(), count != nullptr && count->is_integral() ? count->as_int() : -1,
            limits_.max_output, out);
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
    Value otherwise = fallback != nullptr ? *fallback : Value::of_int(0);
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
Value Renderer::indent(const Value& x, const Args& args) {
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
Value Renderer::get_path(const Value& item, const Value& path) {
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

bool Renderer::apply_test(const std::string& name, const Value& x, const Args& args) {
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

}  // namespace titan::data::jinja::detail
