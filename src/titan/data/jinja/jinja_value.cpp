#include "titan/data/jinja/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "titan/data/jinja/jinja_heap.h"

namespace titan::data::jinja {

namespace {

// Printing a value that holds itself (a namespace) or a huge shared structure
// stops here instead of recursing or growing without bound.
constexpr int kMaxValueNesting = 64;

void check_depth(int depth) {
  if (depth > kMaxValueNesting) throw ValueError("the value nests too deeply to print or compare");
}

// Text being printed: charged to the render's heap as it grows, and refused
// before it passes `max` bytes (a list holding one long string a million
// times is small; its repr is not).
class Printer {
 public:
  Printer(Heap& heap, size_t max) : heap_(heap), text_(heap, max), max_(max) {}
  Printer& operator+=(std::string_view text) {
    room(text.size());
    text_.append(text);
    return *this;
  }
  Printer& operator+=(char c) {
    room(1);
    text_.append(c);
    return *this;
  }
  void append(size_t count, char c) {
    room(count);
    text_.append(count, c);
  }
  Heap& heap() { return heap_; }
  Value finish() { return text_.into_value(); }

 private:
  void room(size_t bytes) const {
    if (text_.size() + bytes > max_) {
      throw ValueError(fmt::format("the value prints longer than the output limit of {} bytes", max_));
    }
  }

  Heap& heap_;
  TextBuffer text_;
  size_t max_;
};

uint32_t decode(std::string_view cp) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(cp[i])); };
  if (cp.size() == 1) return b(0);
  if (cp.size() == 2) return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (cp.size() == 3) return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

template <typename Out>  // std::string or Printer
void append_repr_string(Out& out, const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out += quote;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  out += quote;
}

void append_json_string(Printer& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void append_repr(Printer& out, const Value& value, int depth);

void append_str(Printer& out, const Value& value, int depth) {
  check_depth(depth);
  switch (value.kind) {
    case Value::Kind::Undefined:
      break;
    case Value::Kind::None:
      out += "None";
      break;
    case Value::Kind::Bool:
      out += value.boolean ? "True" : "False";
      break;
    case Value::Kind::Int:
      out += std::to_string(value.integer);
      break;
    case Value::Kind::Float:
      out += float_repr(value.number);
      break;
    case Value::Kind::String:
      out += value.str();
      break;
    case Value::Kind::List:
      out += '[';
      for (size_t i = 0; i < value.list()->items.size(); ++i) {
        if (i > 0) out += ", ";
        append_repr(out, value.list()->items[i], depth + 1);
      }
      out += ']';
      break;
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      out += value.kind == Value::Kind::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [key, item] : value.dict()->items) {
        if (!first) out += ", ";
        first = false;
        append_repr_string(out, key);
        out += ": ";
        append_repr(out, item, depth + 1);
      }
      out += value.kind == Value::Kind::Namespace ? "}>" : "}";
      break;
    }
    case Value::Kind::Function:
      out += "<built-in function " + value.str() + ">";
      break;
    case Value::Kind::Macro:
      out += "<Macro '" + value.str() + "'>";
      break;
  }
}

void append_repr(Printer& out, const Value& value, int depth) {
  if (value.kind == Value::Kind::String) {
    append_repr_string(out, value.str());
  } else if (value.kind == Value::Kind::Undefined) {
    out += "Undefined";
  } else {
    append_str(out, value, depth);
  }
}

bool equals_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
    case Value::Kind::Function:
      return a.str() == b.str();
    case Value::Kind::List: {
      if (a.list()->items.size() != b.list()->items.size()) return false;
      for (size_t i = 0; i < a.list()->items.size(); ++i) {
        if (!equals_at(a.list()->items[i], b.list()->items[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Dict: {
      if (a.dict()->items.size() != b.dict()->items.size()) return false;
      for (const auto& [key, item] : a.dict()->items) {
        const Value* other = b.dict()->find(key);
        if (other == nullptr || !equals_at(item, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace:
      return a.object == b.object;
    case Value::Kind::Macro:
      return a.macro == b.macro;
    default:
      return false;
  }
}

void append_json(Printer& out, const Value& value, int indent, const std::string& item_separator,
                 const std::string& key_separator, bool sort_keys, int depth) {
  check_depth(depth);
  const auto newline = [&](int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  };
  switch (value.kind) {
    case Value::Kind::None:
      out += "null";
      break;
    case Value::Kind::Bool:
      out += value.boolean ? "true" : "false";
      break;
    case Value::Kind::Int:
      out += std::to_string(value.integer);
      break;
    case Value::Kind::Float:
      if (std::isnan(value.number)) {
        out += "NaN";
      } else if (std::isinf(value.number)) {
        out += value.number > 0 ? "Infinity" : "-Infinity";
      } else {
        out += float_repr(value.number);
      }
      break;
    case Value::Kind::String:
      append_json_string(out, value.str());
      break;
    case Value::Kind::List: {
      const auto& items = value.list()->items;
      if (items.empty()) {
        out += "[]";
        break;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_separator;
        newline(depth + 1);
        append_json(out, items[i], indent, item_separator, key_separator, sort_keys, depth + 1);
      }
      newline(depth);
      out += ']';
      break;
    }
    case Value::Kind::Dict: {
      const Scratch scratch(out.heap(), value.dict()->items.size() * sizeof(void*));
      std::vector<const std::pair<std::string, Value>*> entries;
      entries.reserve(value.dict()->items.size());
      for (const auto& entry : value.dict()->items) entries.push_back(&entry);
      if (sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](auto* x, auto* y) { return x->first < y->first; });
      }
      if (entries.empty()) {
        out += "{}";
        break;
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += item_separator;
        newline(depth + 1);
        append_json_string(out, entries[i]->first);
        out += key_separator;
        append_json(out, entries[i]->second, indent, item_separator, key_separator, sort_keys, depth + 1);
      }
      newline(depth);
      out += '}';
      break;
    }
    default:
      throw ValueError("Object of type " + type_name(value) + " is not JSON serializable");
  }
}

}  // namespace

const Value* Dict::find(std::string_view key) const {
  for (const auto& [name, value] : items) {
    if (name == key) return &value;
  }
  return nullptr;
}

std::string type_name(const Value& value) {
  switch (value.kind) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "NoneType";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return "str";
    case Value::Kind::List:
      return "list";
    case Value::Kind::Dict:
      return "dict";
    case Value::Kind::Namespace:
      return "Namespace";
    case Value::Kind::Function:
      return "builtin_function_or_method";
    case Value::Kind::Macro:
      return "Macro";
  }
  return "?";
}

bool truthy(const Value& value) {
  switch (value.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return false;
    case Value::Kind::Bool:
      return value.boolean;
    case Value::Kind::Int:
      return value.integer != 0;
    case Value::Kind::Float:
      return value.number != 0;
    case Value::Kind::String:
      return !value.str().empty();
    case Value::Kind::List:
      return !value.list()->items.empty();
    case Value::Kind::Dict:
      return !value.dict()->items.empty();
    default:
      return true;
  }
}

Value to_str(const Value& value, Heap& heap, size_t max_size) {
  if (value.kind == Value::Kind::String) return value;
  Printer out(heap, max_size);
  append_str(out, value, 0);
  return out.finish();
}

Value repr(const Value& value, Heap& heap, size_t max_size) {
  Printer out(heap, max_size);
  append_repr(out, value, 0);
  return out.finish();
}

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Python switches to exponent notation below 1e-4 and from 1e16.
  const double magnitude = std::fabs(value);
  std::string text;
  if (magnitude != 0 && (magnitude < 1e-4 || magnitude >= 1e16)) {
    // fmt's "{}" picks the shortest round-trip digits; Python writes the exponent as e+16, e-05.
    text = fmt::format("{}", value);
    const size_t e = text.find('e');
    if (e != std::string::npos) {
      std::string mantissa = text.substr(0, e);
      std::string exponent = text.substr(e + 1);
      const char sign = exponent[0] == '-' ? '-' : '+';
      if (exponent[0] == '-' || exponent[0] == '+') exponent = exponent.substr(1);
      if (exponent.size() < 2) exponent = "0" + exponent;
      return mantissa + "e" + sign + exponent;
    }
    return text;
  }
  text = fmt::format("{}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
  }
  if (a.kind == Value::Kind::String && b.kind == Value::Kind::String) {
    const int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
    const auto& x = a.list()->items;
    const auto& y = b.list()->items;
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw ValueError("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

Value to_json(const Value& value, int indent, const std::string& item_separator, const std::string& key_separator,
              bool sort_keys, Heap& heap, size_t max_size) {
  Printer out(heap, max_size);
  append_json(out, value, indent, item_separator, key_separator, sort_keys, 0);
  return out.finish();
}

namespace {

// jinja2's object_type_repr: "None", else "<Python type> object".
std::string object_type_repr(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::None:
      return "None";
    case Value::Kind::Namespace:
      return "jinja2.utils.Namespace object";
    case Value::Kind::Macro:
      return "jinja2.runtime.Macro object";
    default:
      return type_name(Value::make(kind)) + " object";
  }
}

}  // namespace

std::string undefined_message(const Value& value) {
  std::string name;
  append_repr_string(name, value.str());
  switch (value.missing) {
    case Value::Missing::Variable:
      return name + " is undefined";
    case Value::Missing::Attribute: {
      std::string type;
      append_repr_string(type, object_type_repr(value.missing_on));
      return type + " has no attribute " + name;
    }
    case Value::Missing::Index:
      return object_type_repr(value.missing_on) + " has no element " + std::to_string(value.integer);
    case Value::Missing::Element:
      return object_type_repr(value.missing_on) + " has no element " + value.str();
    case Value::Missing::Parameter:
      return "parameter " + name + " was not provided";
    case Value::Missing::Hint:
      return value.str();
    case Value::Missing::Unknown:
      break;
  }
  return "the value is undefined";
}

size_t code_point_length(std::string_view text, size_t pos) {
  const auto c = static_cast<unsigned char>(text[pos]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (pos + n > text.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(text[pos + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

std::vector<std::string_view> code_points(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = code_point_length(text, i);
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

size_t code_point_count(std::string_view text) {
  size_t count = 0;
  for (const char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

bool is_python_space(std::string_view code_point) {
  const uint32_t c = decode(code_point);
  if (code_point.size() == 1) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string strip(std::string_view text, bool left, bool right, const std::string* chars) {
  // The code points to strip, sorted for a binary search: `chars` may be long.
  std::vector<std::string_view> strip_set;
  if (chars != nullptr) {
    strip_set = code_points(*chars);
    std::sort(strip_set.begin(), strip_set.end());
    strip_set.erase(std::unique(strip_set.begin(), strip_set.end()), strip_set.end());
  }
  const auto strippable = [&](std::string_view cp) {
    if (chars == nullptr) return is_python_space(cp);
    return std::binary_search(strip_set.begin(), strip_set.end(), cp);
  };
  // One walk in place (a long text is never split into a vector): where the
  // first code point to keep starts and the last one ends.
  size_t first_kept = std::string_view::npos;
  size_t last_kept_end = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = code_point_length(text, i);
    if (!strippable(text.substr(i, n))) {
      if (first_kept == std::string_view::npos) first_kept = i;
      last_kept_end = i + n;
    }
    i += n;
  }
  if (first_kept == std::string_view::npos) return left || right ? "" : std::string(text);
  const size_t begin = left ? first_kept : 0;
  const size_t end = right ? last_kept_end : text.size();
  return std::string(text.substr(begin, end - begin));
}

}  // namespace titan::data::jinja
