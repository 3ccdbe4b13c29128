// Runtime values of titan's Jinja subset, with Python's meaning: how a value
// prints (str and repr), compares, counts as true, and serialises as JSON
// (json.dumps with ensure_ascii=False, as Hugging Face's tojson filter does).
// Lists and dicts live in the renderer's arena and are referenced by pointer,
// so a namespace that holds itself cannot leak.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace titan::data::jinja {

struct Node;
struct List;
struct Dict;

struct Value {
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function, Macro };
  Kind kind = Kind::Undefined;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string string;    // a String's bytes (UTF-8); a Function's name
  List* list = nullptr;  // List
  Dict* dict = nullptr;  // Dict, Namespace
  const Node* macro = nullptr;

  static Value none() { return make(Kind::None); }
  static Value of_bool(bool b) {
    Value v = make(Kind::Bool);
    v.boolean = b;
    return v;
  }
  static Value of_int(int64_t i) {
    Value v = make(Kind::Int);
    v.integer = i;
    return v;
  }
  static Value of_float(double f) {
    Value v = make(Kind::Float);
    v.number = f;
    return v;
  }
  static Value of_string(std::string s) {
    Value v = make(Kind::String);
    v.string = std::move(s);
    return v;
  }
  static Value make(Kind kind) {
    Value v;
    v.kind = kind;
    return v;
  }

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_integral() const { return kind == Kind::Int || kind == Kind::Bool; }
  int64_t as_int() const { return kind == Kind::Bool ? (boolean ? 1 : 0) : integer; }
  double as_double() const { return kind == Kind::Float ? number : static_cast<double>(as_int()); }
};

struct List {
  std::vector<Value> items;
};

// Insertion-ordered, like Python's dict; chat template dicts are small.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

// A runtime error without a line; the interpreter adds the template line.
class ValueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Python's name for the value's type, for messages.
std::string type_name(const Value& value);
bool truthy(const Value& value);
// Python's str(value) (undefined prints as nothing).
std::string to_str(const Value& value);
// Python's repr(value).
std::string repr(const Value& value);
// Python's float repr: shortest round trip, "1.0" not "1".
std::string float_repr(double value);
bool equals(const Value& a, const Value& b);
// a < b: -1, 0, 1 for numbers, strings and lists; ValueError otherwise.
int compare(const Value& a, const Value& b);
// json.dumps(value, ensure_ascii=False, indent=indent (negative: none), sort_keys=...).
std::string to_json(const Value& value, int indent, const std::string& item_separator, const std::string& key_separator,
                    bool sort_keys);

// UTF-8 strings as Python sees them: code points.
std::vector<std::string_view> code_points(std::string_view text);
size_t code_point_count(std::string_view text);
// Strips Python's str.strip() whitespace (or the code points of `chars`) from the ends.
std::string strip(std::string_view text, bool left, bool right, const std::string* chars = nullptr);
bool is_python_space(std::string_view code_point);

}  // namespace titan::data::jinja
