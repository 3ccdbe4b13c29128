// Runtime values of titan's Jinja subset, with Python's meaning: how a value
// prints (str and repr), compares, counts as true, and serialises as JSON
// (json.dumps with ensure_ascii=False, as Hugging Face's tojson filter does).
// Strings, lists, dicts and namespaces are shared objects counted by
// reference, made and charged by the render's Heap (jinja_heap.h), so copying
// a Value copies a pointer and a value no one refers to is freed at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace titan::data::jinja {

struct Node;
class Heap;
struct List;
struct Dict;

// The header of every shared object. `charged` is what the heap counts for it
// (the object, its buffers, their allocator overhead).
struct Object {
  enum class Type : uint8_t { String, List, Dict };
  Object(Type kind, Heap& owner) : type(kind), heap(&owner) {}
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;

  Type type;
  size_t refs = 0;
  size_t charged = 0;
  Heap* heap;
  Object* doomed_next = nullptr;  // the heap's queue of objects to free
};

// Frees `object` (its count reached zero); see Heap::destroy.
void destroy_object(Object* object) noexcept;

// The text every empty string and missing name points at.
inline const std::string kNoText;

struct Value {
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function, Macro };
  // How an Undefined came about: jinja2 names it when a template looks inside it.
  enum class Missing : uint8_t {
    Unknown,
    Variable,   // `text` is the variable's name
    Attribute,  // `text` is the attribute's name, `missing_on` the kind looked into
    Index,      // `integer` is the index, `missing_on` the kind looked into
    Element,    // `text` is the key's repr, `missing_on` the kind looked into
    Parameter,  // `text` is the macro parameter's name
    Hint,       // `text` says why
  };

  Kind kind = Kind::Undefined;
  bool boolean = false;
  Missing missing = Missing::Unknown;
  Kind missing_on = Kind::Undefined;
  int64_t integer = 0;
  double number = 0;
  // A String's bytes (UTF-8), a Function's or Macro's name, an Undefined's
  // name or hint. They live in `object` or in something that outlives the
  // render (the template, the variables' JSON, a static).
  const std::string* text = &kNoText;
  // The List, Dict or Namespace; for a String or Undefined, the owner of
  // `text` (a string object or a dict holding it as a key) or null.
  Object* object = nullptr;
  const Node* macro = nullptr;

  Value() = default;
  Value(const Value& other) noexcept {
    copy_fields(other);
    if (object != nullptr) ++object->refs;
  }
  Value(Value&& other) noexcept {
    copy_fields(other);
    other.clear();
  }
  Value& operator=(const Value& other) noexcept {
    if (this == &other) return *this;
    // Retain before releasing: `other` may live inside what this value holds.
    if (other.object != nullptr) ++other.object->refs;
    Object* old = object;
    copy_fields(other);
    drop(old);
    return *this;
  }
  Value& operator=(Value&& other) noexcept {
    if (this == &other) return *this;
    Object* old = object;
    copy_fields(other);
    other.clear();
    drop(old);
    return *this;
  }
  ~Value() { drop(object); }

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
  // A string whose bytes `owner` keeps alive (null: they outlive the render).
  static Value borrowed(const std::string& s, Object* owner = nullptr) {
    Value v = make(Kind::String);
    v.text = &s;
    v.object = owner;
    if (owner != nullptr) ++owner->refs;
    return v;
  }
  static Value make(Kind kind) {
    Value v;
    v.kind = kind;
    return v;
  }
  // An Undefined that says why, for errors (see undefined_message).
  static Value undefined(Missing missing, const std::string& text, Object* owner = nullptr) {
    Value v = borrowed(text, owner);
    v.kind = Kind::Undefined;
    v.missing = missing;
    return v;
  }

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_integral() const { return kind == Kind::Int || kind == Kind::Bool; }
  int64_t as_int() const { return kind == Kind::Bool ? (boolean ? 1 : 0) : integer; }
  double as_double() const { return kind == Kind::Float ? number : static_cast<double>(as_int()); }
  const std::string& str() const { return *text; }
  List* list() const;  // List only
  Dict* dict() const;  // Dict and Namespace only

 private:
  void copy_fields(const Value& other) noexcept {
    kind = other.kind;
    boolean = other.boolean;
    missing = other.missing;
    missing_on = other.missing_on;
    integer = other.integer;
    number = other.number;
    text = other.text;
    object = other.object;
    macro = other.macro;
  }
  // A moved-from value is a plain Undefined that holds nothing.
  void clear() noexcept {
    kind = Kind::Undefined;
    missing = Missing::Unknown;
    text = &kNoText;
    object = nullptr;
  }
  static void drop(Object* object) noexcept {
    if (object != nullptr && --object->refs == 0) destroy_object(object);
  }
};

struct StringObject : Object {
  explicit StringObject(Heap& owner) : Object(Type::String, owner) {}
  std::string bytes;
};

// Lists never change once built (Hugging Face renders in an immutable sandbox).
struct List : Object {
  explicit List(Heap& owner) : Object(Type::List, owner) {}
  std::vector<Value> items;
};

// Insertion-ordered, like Python's dict; chat template dicts are small. Only
// a namespace changes after it is built, so only a namespace closes a cycle:
// the heap links every namespace alive to break cycles at the end of a render.
struct Dict : Object {
  explicit Dict(Heap& owner) : Object(Type::Dict, owner) {}
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  Dict* prev = nullptr;  // the heap's list of namespaces alive
  Dict* next = nullptr;

  const Value* find(std::string_view key) const;
  // Adds or replaces `key`, charging the heap for what grows (may throw ValueError).
  void set(const std::string& key, Value value);
  // Adds `key`, which the caller knows is new.
  void append(const std::string& key, Value value);
  void reserve(size_t count);
};

inline List* Value::list() const { return static_cast<List*>(object); }
inline Dict* Value::dict() const { return static_cast<Dict*>(object); }

// A runtime error without a line; the interpreter adds the template line.
class ValueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Python's name for the value's type, for messages.
std::string type_name(const Value& value);
bool truthy(const Value& value);
// Printing makes a string value on `heap` (a string prints as itself), and
// fails with ValueError past max_size bytes: a value can print far longer than
// it is.
// Python's str(value) (undefined prints as nothing).
Value to_str(const Value& value, Heap& heap, size_t max_size);
// Python's repr(value).
Value repr(const Value& value, Heap& heap, size_t max_size);
// Python's float repr: shortest round trip, "1.0" not "1".
std::string float_repr(double value);
bool equals(const Value& a, const Value& b);
// a < b: -1, 0, 1 for numbers, strings and lists; ValueError otherwise.
int compare(const Value& a, const Value& b);
// json.dumps(value, ensure_ascii=False, indent=indent (negative: none), sort_keys=...).
Value to_json(const Value& value, int indent, const std::string& item_separator, const std::string& key_separator,
              bool sort_keys, Heap& heap, size_t max_size);
// jinja2's message for looking inside an undefined value, e.g. "'dict object'
// has no attribute 'x'" or "'x' is undefined".
std::string undefined_message(const Value& value);

// UTF-8 strings as Python sees them: code points. An invalid byte counts as one.
size_t code_point_length(std::string_view text, size_t pos);
std::vector<std::string_view> code_points(std::string_view text);
size_t code_point_count(std::string_view text);
// Strips Python's str.strip() whitespace (or the code points of `chars`) from the ends.
std::string strip(std::string_view text, bool left, bool right, const std::string* chars = nullptr);
bool is_python_space(std::string_view code_point);

}  // namespace titan::data::jinja
