#include "titan/checkpoint/pickle_reader.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <map>

#include "titan/core/error.h"

namespace titan::checkpoint {

std::string PickleValue::describe() const {
  switch (kind) {
    case PickleKind::none:
      return "None";
    case PickleKind::boolean:
      return "bool";
    case PickleKind::integer:
      return "int";
    case PickleKind::floating:
      return "float";
    case PickleKind::text:
      return "str";
    case PickleKind::bytes:
      return "bytes";
    case PickleKind::tuple:
      return "tuple";
    case PickleKind::list:
      return "list";
    case PickleKind::dict:
      return "dict";
    case PickleKind::set:
      return "set";
    case PickleKind::global:
      return fmt::format("global {}.{}", text, name);
    case PickleKind::object:
      return callable != nullptr && callable->kind == PickleKind::global
                 ? fmt::format("{}.{} object", callable->text, callable->name)
                 : "object";
    case PickleKind::persistent:
      return "persistent id";
  }
  return "value";
}

namespace {

// Limits that keep a hostile stream from taking unbounded memory beyond its own size.
constexpr size_t kMaxStack = 1 << 20;
constexpr size_t kMaxMarks = kMaxPickleDepth;

class Unpickler {
 public:
  Unpickler(std::string_view bytes, const PickleGlobalFilter& accepts, const std::string& source)
      : bytes_(bytes), accepts_(accepts), source_(source) {}

  Pickle run() {
    while (true) {
      opcode_at_ = position_;
      const auto opcode = static_cast<uint8_t>(take(1)[0]);
      if (opcode == '.') break;  // STOP
      step(opcode);
    }
    if (stack_.size() != 1 || !marks_.empty()) error("STOP with {} values on the stack (one expected)", stack_.size());
    pickle_.root = stack_.back();
    return std::move(pickle_);
  }

 private:
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: not a pickle titan reads (byte {}): {}", source_, opcode_at_,
         fmt::format(format, std::forward<Args>(args)...));
  }

  std::string_view take(size_t count) {
    if (count > bytes_.size() - position_) error("the stream ends early (truncated file?)");
    const std::string_view out = bytes_.substr(position_, count);
    position_ += count;
    return out;
  }
  std::string_view line() {
    const size_t end = bytes_.find('\n', position_);
    if (end == std::string_view::npos) error("the stream ends early inside a text argument (truncated file?)");
    const std::string_view out = bytes_.substr(position_, end - position_);
    position_ = end + 1;
    return out;
  }
  uint64_t little_endian(size_t count) {
    const std::string_view raw = take(count);
    uint64_t value = 0;
    for (size_t i = 0; i < count; ++i) value |= uint64_t{static_cast<uint8_t>(raw[i])} << (8 * i);
    return value;
  }
  size_t length(size_t count) {
    const uint64_t value = little_endian(count);
    if (value > bytes_.size() - position_) error("a length of {} runs past the end of the stream", value);
    return static_cast<size_t>(value);
  }

  PickleValue* make(PickleKind kind) { return pickle_.make(kind); }
  void push(PickleValue* value) {
    if (stack_.size() >= kMaxStack) error("more than {} values on the stack", kMaxStack);
    stack_.push_back(value);
  }
  PickleValue* pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) error("pops an empty stack");
    PickleValue* value = stack_.back();
    stack_.pop_back();
    return value;
  }
  PickleValue* top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) error("needs a value on the stack");
    return stack_.back();
  }
  // The values pushed since the last MARK, which is removed.
  std::vector<PickleValue*> pop_mark() {
    if (marks_.empty()) error("no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleValue*> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  PickleValue* integer(int64_t value) {
    PickleValue* out = make(PickleKind::integer);
    out->integer = value;
    return out;
  }
  PickleValue* text(PickleKind kind, std::string_view value) {
    PickleValue* out = make(kind);
    out->text = std::string(value);
    return out;
  }
  PickleValue* sequence(PickleKind kind, const std::vector<PickleValue*>& items) {
    PickleValue* out = make(kind);
    out->items.assign(items.begin(), items.end());
    return out;
  }
  // LONG1/LONG4: little-endian two's complement of `count` bytes.
  PickleValue* long_integer(size_t count) {
    if (count > 8) error("an integer of {} bytes (titan reads up to 64 bits)", count);
    uint64_t value = little_endian(count);
    if (count > 0 && count < 8 && (value >> (8 * count - 1)) != 0) value |= ~uint64_t{0} << (8 * count);
    return integer(static_cast<int64_t>(value));
  }
  PickleValue* decimal(std::string_view digits) {
    if (!digits.empty() && digits.back() == 'L') digits.remove_suffix(1);
    int64_t value = 0;
    const auto [end, status] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (status != std::errc() || end != digits.data() + digits.size()) {
      error("'{}' is not an integer titan reads", std::string(digits));
    }
    return integer(value);
  }
  PickleValue* global(const std::string& module, const std::string& name) {
    if (module.empty() || name.empty()) error("a global with an empty name");
    if (!accepts_(module, name)) {
      fail(
          "{}: the pickle names the global {}.{}, which titan does not accept: refused before anything ran (titan "
          "reads only the classes PyTorch writes for tensors, state dicts and checkpoint metadata)",
          source_, module, name);
    }
    PickleValue* out = make(PickleKind::global);
    out->text = module;
    out->name = name;
    return out;
  }
  PickleValue* object(PickleValue* callable, PickleValue* arguments) {
    if (callable->kind != PickleKind::global) error("calls a {}, not a global", callable->describe());
    if (arguments->kind != PickleKind::tuple)
      error("calls {}.{} with a {} of arguments", callable->text, callable->name, arguments->describe());
    PickleValue* out = make(PickleKind::object);
    out->callable = callable;
    out->arguments = arguments;
    return out;
  }
  void memo_put(uint64_t key) { memo_[key] = top(); }
  void memo_get(uint64_t key) {
    const auto found = memo_.find(key);
    if (found == memo_.end()) error("memo entry {} was never stored", key);
    push(found->second);
  }
  void append(PickleValue* target, const std::vector<PickleValue*>& items) {
    if (target->kind != PickleKind::list && target->kind != PickleKind::object) {
      error("appends to a {}", target->describe());
    }
    target->items.insert(target->items.end(), items.begin(), items.end());
  }
  void set_items(PickleValue* target, const std::vector<PickleValue*>& items) {
    if (target->kind != PickleKind::dict && target->kind != PickleKind::object) {
      error("sets items of a {}", target->describe());
    }
    if (items.size() % 2 != 0) error("SETITEMS with an odd number of values");
    // Kept in order, repeats included: PickleValue::find returns the last
    // (Python's dict keeps it), and consumers that flatten names refuse repeats.
    for (size_t i = 0; i < items.size(); i += 2) target->entries.emplace_back(items[i], items[i + 1]);
  }

  void step(uint8_t opcode) {
    switch (opcode) {
      case 0x80: {  // PROTO
        const auto version = static_cast<uint8_t>(take(1)[0]);
        if (version > 5) error("protocol {} (titan reads 0 to 5)", version);
        return;
      }
      case 0x95:
        take(8);
        return;  // FRAME: a length hint only
      case '(':  // MARK
        if (marks_.size() >= kMaxMarks) error("nests deeper than {}", kMaxMarks);
        marks_.push_back(stack_.size());
        return;
      case '0':
        pop();
        return;  // POP
      case '1':
        pop_mark();
        return;  // POP_MARK
      case '2':
        push(top());
        return;  // DUP
      case 'N':
        push(make(PickleKind::none));
        return;
      case 0x88:
      case 0x89: {  // NEWTRUE, NEWFALSE
        PickleValue* out = make(PickleKind::boolean);
        out->boolean = opcode == 0x88;
        push(out);
        return;
      }
      case 'I': {  // INT: "01"/"00" are True/False in protocol 0
        const std::string_view digits = line();
        if (digits == "01" || digits == "00") {
          PickleValue* out = make(PickleKind::boolean);
          out->boolean = digits == "01";
          push(out);
        } else {
          push(decimal(digits));
        }
        return;
      }
      case 'L':
        push(decimal(line()));
        return;  // LONG
      case 'J':
        push(integer(static_cast<int32_t>(little_endian(4))));
        return;
      case 'K':
        push(integer(static_cast<int64_t>(little_endian(1))));
        return;
      case 'M':
        push(integer(static_cast<int64_t>(little_endian(2))));
        return;
      case 0x8a:
        push(long_integer(static_cast<size_t>(little_endian(1))));
        return;  // LONG1
      case 0x8b:
        push(long_integer(length(4)));
        return;    // LONG4
      case 'F': {  // FLOAT (text)
        const std::string digits(line());
        char* end = nullptr;
        PickleValue* out = make(PickleKind::floating);
        out->floating = std::strtod(digits.c_str(), &end);
        if (digits.empty() || end != digits.c_str() + digits.size()) error("'{}' is not a float", digits);
        push(out);
        return;
      }
      case 'G': {  // BINFLOAT: big-endian IEEE double
        const std::string_view raw = take(8);
        uint64_t bits = 0;
        for (char c : raw) bits = (bits << 8) | static_cast<uint8_t>(c);
        PickleValue* out = make(PickleKind::floating);
        std::memcpy(&out->floating, &bits, sizeof bits);
        push(out);
        return;
      }
      case 'S': {  // STRING: a quoted repr; only plain ones (no escapes) are read
        std::string_view quoted = line();
        if (quoted.size() < 2 || quoted.front() != quoted.back() || (quoted.front() != '\'' && quoted.front() != '"') ||
            quoted.find('\\') != std::string_view::npos) {
          error("a protocol-0 string titan does not read");
        }
        push(text(PickleKind::text, quoted.substr(1, quoted.size() - 2)));
        return;
      }
      case 'V': {  // UNICODE: raw-unicode-escape; only plain ones
        const std::string_view raw = line();
        if (raw.find('\\') != std::string_view::npos) error("an escaped protocol-0 string titan does not read");
        push(text(PickleKind::text, raw));
        return;
      }
      case 'T':
        push(text(PickleKind::text, take(length(4))));
        return;  // BINSTRING (Python 2 str)
      case 'U':
        push(text(PickleKind::text, take(length(1))));
        return;  // SHORT_BINSTRING
      case 'X':
        push(text(PickleKind::text, take(length(4))));
        return;  // BINUNICODE
      case 0x8c:
        push(text(PickleKind::text, take(length(1))));
        return;  // SHORT_BINUNICODE
      case 0x8d:
        push(text(PickleKind::text, take(length(8))));
        return;  // BINUNICODE8
      case 'B':
        push(text(PickleKind::bytes, take(length(4))));
        return;  // BINBYTES
      case 'C':
        push(text(PickleKind::bytes, take(length(1))));
        return;  // SHORT_BINBYTES
      case 0x8e:
      case 0x96:
        push(text(PickleKind::bytes, take(length(8))));
        return;  // BINBYTES8, BYTEARRAY8
      case ')':
        push(make(PickleKind::tuple));
        return;
      case 't':
        push(sequence(PickleKind::tuple, pop_mark()));
        return;
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        std::vector<PickleValue*> items(opcode - 0x84);
        for (size_t i = items.size(); i-- > 0;) items[i] = pop();
        push(sequence(PickleKind::tuple, items));
        return;
      }
      case ']':
        push(make(PickleKind::list));
        return;
      case 'l':
        push(sequence(PickleKind::list, pop_mark()));
        return;
      case 'a': {  // APPEND
        PickleValue* item = pop();
        append(top(), {item});
        return;
      }
      case 'e': {  // APPENDS
        const std::vector<PickleValue*> items = pop_mark();
        append(top(), items);
        return;
      }
      case '}':
        push(make(PickleKind::dict));
        return;
      case 'd': {  // DICT
        const std::vector<PickleValue*> items = pop_mark();
        PickleValue* out = make(PickleKind::dict);
        set_items(out, items);
        push(out);
        return;
      }
      case 's': {  // SETITEM
        PickleValue* value = pop();
        PickleValue* key = pop();
        set_items(top(), {key, value});
        return;
      }
      case 'u': {  // SETITEMS
        const std::vector<PickleValue*> items = pop_mark();
        set_items(top(), items);
        return;
      }
      case 0x8f:
        push(make(PickleKind::set));
        return;     // EMPTY_SET
      case 0x90: {  // ADDITEMS
        const std::vector<PickleValue*> items = pop_mark();
        PickleValue* target = top();
        if (target->kind != PickleKind::set) error("adds items to a {}", target->describe());
        target->items.insert(target->items.end(), items.begin(), items.end());
        return;
      }
      case 0x91:
        push(sequence(PickleKind::set, pop_mark()));
        return;    // FROZENSET
      case 'c': {  // GLOBAL
        const std::string module(line());
        const std::string name(line());
        push(global(module, name));
        return;
      }
      case 0x93: {  // STACK_GLOBAL
        PickleValue* name = pop();
        PickleValue* module = pop();
        if (module->kind != PickleKind::text || name->kind != PickleKind::text) error("STACK_GLOBAL of non-strings");
        push(global(module->text, name->text));
        return;
      }
      case 'i': {  // INST: a global called with the values since MARK
        const std::string module(line());
        const std::string name(line());
        const std::vector<PickleValue*> items = pop_mark();
        push(object(global(module, name), sequence(PickleKind::tuple, items)));
        return;
      }
      case 'o': {  // OBJ: MARK class args...
        std::vector<PickleValue*> items = pop_mark();
        if (items.empty()) error("OBJ without a class");
        PickleValue* callable = items.front();
        items.erase(items.begin());
        push(object(callable, sequence(PickleKind::tuple, items)));
        return;
      }
      case 'R':     // REDUCE
      case 0x81: {  // NEWOBJ
        PickleValue* arguments = pop();
        PickleValue* callable = pop();
        push(object(callable, arguments));
        return;
      }
      case 0x92: {  // NEWOBJ_EX
        PickleValue* keywords = pop();
        PickleValue* arguments = pop();
        PickleValue* callable = pop();
        if (keywords->kind != PickleKind::dict || !keywords->entries.empty()) error("NEWOBJ_EX with keyword arguments");
        push(object(callable, arguments));
        return;
      }
      case 'b': {  // BUILD
        PickleValue* state = pop();
        PickleValue* target = top();
        if (target->kind != PickleKind::object) error("BUILD on a {}", target->describe());
        if (target->state != nullptr) error("BUILD twice on one {}", target->describe());
        target->state = state;
        return;
      }
      case 'P': {  // PERSID
        PickleValue* out = make(PickleKind::persistent);
        out->items.push_back(text(PickleKind::text, line()));
        push(out);
        return;
      }
      case 'Q': {  // BINPERSID
        PickleValue* out = make(PickleKind::persistent);
        out->items.push_back(pop());
        push(out);
        return;
      }
      case 'p':
        memo_put(decimal(line())->integer);
        return;  // PUT
      case 'q':
        memo_put(little_endian(1));
        return;  // BINPUT
      case 'r':
        memo_put(little_endian(4));
        return;  // LONG_BINPUT
      case 0x94:
        memo_put(memo_.size());
        return;  // MEMOIZE
      case 'g':
        memo_get(static_cast<uint64_t>(decimal(line())->integer));
        return;  // GET
      case 'h':
        memo_get(little_endian(1));
        return;  // BINGET
      case 'j':
        memo_get(little_endian(4));
        return;  // LONG_BINGET
      case 0x82:
      case 0x83:
      case 0x84:
        error("the copyreg extension registry (EXT opcodes), which titan does not read");
      case 0x97:
      case 0x98:
        error("out-of-band buffers (protocol 5), which titan does not read");
      default:
        error("unknown opcode 0x{:02x}", opcode);
    }
  }

  std::string_view bytes_;
  const PickleGlobalFilter& accepts_;
  const std::string& source_;
  size_t position_ = 0, opcode_at_ = 0;
  Pickle pickle_;
  std::vector<PickleValue*> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PickleValue*> memo_;
};

}  // namespace

Pickle read_pickle(std::string_view bytes, const PickleGlobalFilter& accepts, const std::string& source) {
  return Unpickler(bytes, accepts, source).run();
}

}  // namespace titan::checkpoint
