// What a Python pickle holds, as data: titan reads pickles (PyTorch's .pth /
// .bin files, Distributed Checkpoint metadata) without running any of them.
// Where Python would call a class or function (REDUCE, NEWOBJ, BUILD), the
// reader records the call as an `object` value: the global it names, its
// arguments and the state set on it. The consumer decides what an object
// means (a tensor, a torch.Size, a dataclass); nothing is ever called.
//
// Values live in a Pickle's arena and point at each other with plain
// pointers: a pickle may share one value in several places (the memo), and
// even refer to itself, without ownership cycles.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace titan::checkpoint {

enum class PickleKind {
  none,
  boolean,
  integer,
  floating,
  text,
  bytes,
  tuple,
  list,
  dict,
  set,
  global,
  object,
  persistent
};

struct PickleValue {
  PickleKind kind = PickleKind::none;
  bool boolean = false;
  int64_t integer = 0;  // integers past 64 bits are refused
  double floating = 0;
  std::string text;  // text (UTF-8) and bytes; a global's module
  std::string name;  // a global's qualified name
  // tuple, list and set items; an object's appended items (APPEND onto it);
  // a persistent id: its one value.
  std::vector<const PickleValue*> items;
  // dict entries in insertion order; an object's set items (SETITEM onto it).
  std::vector<std::pair<const PickleValue*, const PickleValue*>> entries;
  // object: the global called (a class or a function), its argument tuple, and
  // what BUILD set on it (null when none).
  const PickleValue* callable = nullptr;
  const PickleValue* arguments = nullptr;
  const PickleValue* state = nullptr;

  bool is(PickleKind k) const { return kind == k; }
  bool is_global(std::string_view module, std::string_view qualified_name) const {
    return kind == PickleKind::global && text == module && name == qualified_name;
  }
  // An object made by calling `module.qualified_name`.
  bool is_object_of(std::string_view module, std::string_view qualified_name) const {
    return kind == PickleKind::object && callable != nullptr && callable->is_global(module, qualified_name);
  }
  // The value under text key `key` of a dict (or of an object's set items), the
  // last if repeated (as Python keeps it); null if absent.
  const PickleValue* find(std::string_view key) const {
    for (auto entry = entries.rbegin(); entry != entries.rend(); ++entry) {
      if (entry->first->kind == PickleKind::text && entry->first->text == key) return entry->second;
    }
    return nullptr;
  }
  // "dict", "tuple", "collections.OrderedDict object", ...: for error messages.
  std::string describe() const;
};

// A parsed pickle: the arena owning every value, and the value STOP returned.
struct Pickle {
  std::deque<PickleValue> values;
  const PickleValue* root = nullptr;
  PickleValue* make(PickleKind kind) {
    values.emplace_back();
    values.back().kind = kind;
    return &values.back();
  }
};

}  // namespace titan::checkpoint
