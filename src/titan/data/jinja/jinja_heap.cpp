#include "titan/data/jinja/jinja_heap.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <new>

namespace titan::data::jinja {

namespace {

// Single ASCII characters: what iterating a string yields most often.
const std::string& ascii_char(unsigned char c) {
  static const std::array<std::string, 128> table = [] {
    std::array<std::string, 128> t;
    for (size_t i = 0; i < t.size(); ++i) t[i] = std::string(1, static_cast<char>(i));
    return t;
  }();
  return table[c];
}

// The bytes a buffer of `count` items of `size` bytes needs, saturating.
size_t array_bytes(size_t count, size_t size) {
  return count > (size_t{1} << 62) / size ? size_t{1} << 62 : block_size(count * size);
}

// Makes an object of type T once its header's cost is charged.
template <typename T>
T* make_object(Heap& heap, size_t extra_charged) {
  const size_t header = block_size(sizeof(T));
  heap.charge(header);
  T* object = nullptr;
  try {
    object = new T(heap);
  } catch (...) {
    heap.uncharge(header);
    throw;
  }
  object->charged = header + extra_charged;
  return object;
}

}  // namespace

void destroy_object(Object* object) noexcept { object->heap->destroy(object); }

Value Heap::string(std::string bytes) {
  if (bytes.empty()) return Value::borrowed(kNoText);
  if (bytes.size() == 1 && static_cast<unsigned char>(bytes[0]) < 0x80) {
    return Value::borrowed(ascii_char(static_cast<unsigned char>(bytes[0])));
  }
  const size_t buffer = string_buffer_size(bytes);
  charge(buffer);
  StringObject* object = nullptr;
  try {
    object = make_object<StringObject>(*this, buffer);
  } catch (...) {
    uncharge(buffer);
    throw;
  }
  object->bytes = std::move(bytes);
  return Value::borrowed(object->bytes, object);
}

Value Heap::code_point(std::string_view bytes) {
  if (bytes.size() == 1 && static_cast<unsigned char>(bytes[0]) < 0x80) {
    return Value::borrowed(ascii_char(static_cast<unsigned char>(bytes[0])));
  }
  return string(std::string(bytes));
}

Value Heap::list(std::vector<Value> items) {
  const size_t buffer = array_bytes(items.capacity(), sizeof(Value));
  charge(buffer);
  return adopt_list(std::move(items), buffer);
}

Value Heap::adopt_list(std::vector<Value>&& items, size_t charged) {
  List* object = make_object<List>(*this, charged);
  object->items = std::move(items);
  Value v = Value::make(Value::Kind::List);
  v.object = object;
  ++object->refs;
  return v;
}

Value Heap::adopt_string(std::string&& bytes, size_t charged) {
  if (bytes.empty()) {
    uncharge(charged);
    return Value::borrowed(kNoText);
  }
  StringObject* object = make_object<StringObject>(*this, charged);
  object->bytes = std::move(bytes);
  return Value::borrowed(object->bytes, object);
}

Value Heap::dict(Value::Kind kind) {
  Dict* object = make_object<Dict>(*this, 0);
  if (kind == Value::Kind::Namespace) {
    object->is_namespace = true;
    object->next = namespaces_;
    if (namespaces_ != nullptr) namespaces_->prev = object;
    namespaces_ = object;
  }
  Value v = Value::make(kind);
  v.object = object;
  ++object->refs;
  return v;
}

void Heap::charge(size_t bytes) {
  if (bytes > limits_.max_live_bytes - std::min(live_, limits_.max_live_bytes)) {
    throw ValueError(
        fmt::format("the template holds more than {} bytes of values and text at once (the live-memory limit)",
                    limits_.max_live_bytes));
  }
  if (bytes > limits_.max_allocated_bytes - std::min(allocated_, limits_.max_allocated_bytes)) {
    throw ValueError(fmt::format("the template allocates more than {} bytes in all (the allocation limit)",
                                 limits_.max_allocated_bytes));
  }
  live_ += bytes;
  allocated_ += bytes;
  peak_ = std::max(peak_, live_);
}

void Heap::work(size_t steps) {
  if (steps > limits_.max_work - std::min(work_, limits_.max_work)) {
    throw ValueError(fmt::format("the template does too much work (over {} steps)", limits_.max_work));
  }
  work_ += steps;
}

void Heap::destroy(Object* object) noexcept {
  object->doomed_next = doomed_;
  doomed_ = object;
  if (destroying_) return;  // the loop below, further up the stack, frees it
  destroying_ = true;
  while (doomed_ != nullptr) {
    Object* next = doomed_;
    doomed_ = next->doomed_next;
    free_object(next);  // releases what it held: those join the queue
  }
  destroying_ = false;
}

void Heap::free_object(Object* object) noexcept {
  uncharge(object->charged);
  switch (object->type) {
    case Object::Type::String:
      delete static_cast<StringObject*>(object);
      break;
    case Object::Type::List:
      delete static_cast<List*>(object);
      break;
    case Object::Type::Dict: {
      auto* dict = static_cast<Dict*>(object);
      if (dict->is_namespace) {
        if (dict->prev != nullptr) dict->prev->next = dict->next;
        if (dict->next != nullptr) dict->next->prev = dict->prev;
        if (namespaces_ == dict) namespaces_ = dict->next;
      }
      delete dict;
      break;
    }
  }
}

void Heap::collect() noexcept {
  // Hold every namespace so none is freed while the others are emptied.
  for (Dict* ns = namespaces_; ns != nullptr; ns = ns->next) ++ns->refs;
  for (Dict* ns = namespaces_; ns != nullptr; ns = ns->next) {
    std::vector<std::pair<std::string, Value>> items = std::move(ns->items);
    ns->items.clear();
    items.clear();  // frees what only the cycle held; never a held namespace
  }
  for (Dict* ns = namespaces_; ns != nullptr;) {
    Dict* next = ns->next;  // read first: freeing `ns` unlinks it; emptied, it frees nothing else
    if (--ns->refs == 0) destroy(ns);
    ns = next;
  }
}

RenderStats Heap::stats() const {
  RenderStats stats;
  stats.peak_live_bytes = peak_;
  stats.allocated_bytes = allocated_;
  stats.work = work_;
  stats.leaked_bytes = live_;
  return stats;
}

void ListBuilder::reserve(size_t count) {
  if (count <= items_.capacity()) return;
  const size_t bytes = array_bytes(count, sizeof(Value));
  heap_.charge(bytes);
  try {
    items_.reserve(count);
  } catch (...) {
    heap_.uncharge(bytes);
    throw;
  }
  heap_.uncharge(charged_);
  charged_ = bytes;
}

Value ListBuilder::finish() {
  Value list = heap_.adopt_list(std::move(items_), charged_);
  charged_ = 0;
  items_ = {};
  return list;
}

void TextBuffer::grow(size_t at_least) {
  const size_t capacity = std::max(at_least, std::min(2 * text_.capacity(), max_size_));
  const size_t bytes = block_size(capacity + 1);
  heap_.charge(bytes);
  try {
    text_.reserve(capacity);
  } catch (...) {
    heap_.uncharge(bytes);
    throw;
  }
  heap_.uncharge(charged_);
  charged_ = bytes;
}

std::string TextBuffer::take() {
  heap_.uncharge(charged_);
  charged_ = 0;
  return std::move(text_);
}

Value TextBuffer::into_value() {
  Value value = heap_.adopt_string(std::move(text_), charged_);
  charged_ = 0;
  text_.clear();
  return value;
}

// Dict's growth is charged here, with the rest of the heap's accounting.

void Dict::reserve(size_t count) {
  if (count <= items.capacity()) return;
  const size_t old_bytes = items.capacity() == 0 ? 0 : array_bytes(items.capacity(), sizeof(items[0]));
  const size_t bytes = array_bytes(count, sizeof(items[0]));
  heap->charge(bytes);
  try {
    items.reserve(count);
  } catch (...) {
    heap->uncharge(bytes);
    throw;
  }
  heap->uncharge(old_bytes);
  charged = charged - old_bytes + bytes;
}

void Dict::append(const std::string& key, Value value) {
  if (items.size() == items.capacity()) reserve(items.size() < 4 ? 4 : 2 * items.size());
  const size_t key_bytes = key.size() > 15 ? block_size(key.size() + 1) : 0;
  heap->charge(key_bytes);
  charged += key_bytes;
  items.emplace_back(key, std::move(value));
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [name, existing] : items) {
    if (name == key) {
      existing = std::move(value);
      return;
    }
  }
  append(key, std::move(value));
}

}  // namespace titan::data::jinja
