#include "titan/data/jinja/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace titan::data::jinja {

namespace {

// Printing a value that holds itself (a namespace) or a huge shared structure
// stops here instead of recursing or growing without bound.
constexpr int kMaxNesting = 64;
constexpr size_t kMaxText = size_t{64} << 20;

void check_depth(int depth) {
  if (depth > kMaxNesting) throw ValueError("the value nests too deeply to print or compare");
}
void check_size(const std::string& out) {
  if (out.size() > kMaxText) throw ValueError("the value is too large to print");
}

uint32_t decode(std::string_view cp) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(cp[i])); };
  if (cp.size() == 1) return b(0);
  if (cp.size() == 2) return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (cp.size() == 3) return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

void append_repr_string(std::string& out, const std::string& s) {
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

void append_json_string(std::string& out, std::string_view s) {
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

void append_repr(std::string& out, const Value& value, int depth);

void append_str(std::string& out, const Value& value, int depth) {
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
      out += value.string;
      break;
    case Value::Kind::List:
      out += '[';
      for (size_t i = 0; i < value.list->items.size(); ++i) {
        if (i > 0) out += ", ";
        append_repr(out, value.list->items[i], depth + 1);
        check_size(out);
      }
      out += ']';
      break;
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      out += value.kind == Value::Kind::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [key, item] : value.dict->items) {
        if (!first) out += ", ";
        first = false;
        append_repr_string(out, key);
        out += ": ";
        append_repr(out, item, depth + 1);
        check_size(out);
      }
      out += value.kind == Value::Kind::Namespace ? "}>" : "}";
      break;
    }
    case Value::Kind::Function:
      out += "<built-in function " + value.string + ">";
      break;
    case Value::Kind::Macro:
      out += "<Macro '" + value.string + "'>";
      break;
  }
}

void append_repr(std::string& out, const Value& value, int depth) {
  if (value.kind == Value::Kind::String) {
    append_repr_string(out, value.string);
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
      return a.string == b.string;
    case Value::Kind::List: {
      if (a.list->items.size() != b.list->items.size()) return false;
      for (size_t i = 0; i < a.list->items.size(); ++i) {
        if (!equals_at(a.list->items[i], b.list->items[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [key, item] : a.dict->items) {
        const Value* other = b.dict->find(key);
        if (other == nullptr || !equals_at(item, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace:
      return a.dict == b.dict;
    case Value::Kind::Macro:
      return a.macro == b.macro;
    default:
      return false;
  }
}

void append_json(std::string& out, const Value& value, int indent, const std::string& item_separator,
                 const std::string& key_separator, bool sort_keys, int depth) {
  check_depth(depth);
  check_size(out);
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
      append_json_string(out, value.string);
      break;
    case Value::Kind::List: {
      const auto& items = value.list->items;
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
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.dict->items) entries.push_back(&entry);
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

void Dict::set(const std::string& key, Value value) {
  for (auto& [name, existing] : items) {
    if (name == key) {
      existing = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
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
      return !value.string.empty();
    case Value::Kind::List:
      return !value.list->items.empty();
    case Value::Kind::Dict:
      return !value.dict->items.empty();
    default:
      return true;
  }
}

std::string to_str(const Value& value) {
  if (value.kind == Value::Kind::String) return value.string;
  std::string out;
  append_str(out, value, 0);
  return out;
}

std::string repr(const Value& value) {
  std::string out;
  append_repr(out, value, 0);
  return out;
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
    const int c = a.string.compare(b.string);  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
    const auto& x = a.list->items;
    const auto& y = b.list->items;
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw ValueError("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::string to_json(const Value& value, int indent, const std::string& item_separator, const std::string& key_separator,
                    bool sort_keys) {
  std::string out;
  append_json(out, value, indent, item_separator, key_separator, sort_keys, 0);
  return out;
}

std::vector<std::string_view> code_points(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (i + n > text.size()) n = 1;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) n = 1;
    }
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
  const std::vector<std::string_view> points = code_points(text);
  std::vector<std::string_view> strip_set;
  if (chars != nullptr) strip_set = code_points(*chars);
  const auto strippable = [&](std::string_view cp) {
    if (chars == nullptr) return is_python_space(cp);
    return std::find(strip_set.begin(), strip_set.end(), cp) != strip_set.end();
  };
  size_t begin = 0;
  size_t end = points.size();
  if (left) {
    while (begin < end && strippable(points[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(points[end - 1])) --end;
  }
  if (begin == end) return "";
  const char* first = points[begin].data();
  const char* last = points[end - 1].data() + points[end - 1].size();
  return std::string(first, static_cast<size_t>(last - first));
}

}  // namespace titan::data::jinja
