// The memory of one render. The heap makes the shared objects behind strings,
// lists, dicts and namespaces (jinja_value.h), frees each one as soon as no
// value refers to it (reference counts: an arena kept to the end of the render
// let a loop that builds a list per iteration grow without bound), and charges
// what they and the text being built hold against the render's Limits:
// max_live_bytes at once, max_allocated_bytes in all; it also counts the
// render's work against max_work. Wherever a size grows with the input (lists
// and strings being built, printed values, output, captured text, short-lived
// buffers) the bytes are charged before they are allocated, so a runaway
// template stops at the limit rather than after the allocation. Not charged:
// the syntax tree and the variables' JSON (the caller's), the scopes' names,
// and a filter's result in the moment between being built and becoming a value.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/jinja/jinja_limits.h"
#include "titan/data/jinja/jinja_value.h"

namespace titan::data::jinja {

// The block glibc's malloc hands out for `bytes`: an 8-byte header, 16-byte
// granules, 32 bytes at least. Charging blocks, not requests, keeps the count
// close to what the process really holds.
constexpr size_t block_size(size_t bytes) {
  if (bytes == 0) return 0;
  if (bytes > (size_t{1} << 62)) return bytes;  // hopeless anyway: charge() refuses it
  const size_t block = (bytes + 8 + 15) & ~size_t{15};
  return block < 32 ? 32 : block;
}

// What a std::string holds beyond itself: nothing while its bytes fit in the
// string (libstdc++ keeps up to 15 inside), else its buffer.
inline size_t string_buffer_size(const std::string& s) { return s.capacity() > 15 ? block_size(s.capacity() + 1) : 0; }

class Heap {
 public:
  explicit Heap(const Limits& limits) : limits_(limits) {}
  ~Heap() { collect(); }
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;

  // A string holding `bytes` (the caller checks Limits::max_output). Empty
  // strings and single ASCII characters share static text and cost nothing.
  Value string(std::string bytes);
  // One code point of a string, as a string.
  Value code_point(std::string_view bytes);
  // A list of `items`, charged after they were built: only for lists whose
  // length the template's text bounds (literals, pairs); see ListBuilder.
  Value list(std::vector<Value> items);
  // An empty Dict or Namespace.
  Value dict(Value::Kind kind);
  // Objects over buffers that a ListBuilder or TextBuffer already charged.
  Value adopt_list(std::vector<Value>&& items, size_t charged);
  Value adopt_string(std::string&& bytes, size_t charged);

  // Counts `bytes` as held and allocated, or throws ValueError naming the
  // limit they would cross (nothing is counted then).
  void charge(size_t bytes);
  void uncharge(size_t bytes) noexcept { live_ -= bytes; }
  // Counts `steps` of work, or throws ValueError at Limits::max_work.
  void work(size_t steps);

  // Frees `object` and whatever only it held, without recursion: a chain of a
  // million nested lists must not overflow the stack.
  void destroy(Object* object) noexcept;
  // Empties every namespace still alive, which breaks every cycle and frees
  // the objects in them. Call once nothing outside the heap holds values.
  void collect() noexcept;

  RenderStats stats() const;
  const Limits& limits() const { return limits_; }

 private:
  void free_object(Object* object) noexcept;

  const Limits& limits_;
  size_t live_ = 0;
  size_t peak_ = 0;
  size_t allocated_ = 0;
  size_t work_ = 0;
  Object* doomed_ = nullptr;  // objects waiting to be freed
  bool destroying_ = false;
  Dict* namespaces_ = nullptr;  // the namespaces alive, linked through Dict::prev/next
};

// Builds a list whose length the input decides (range, split, map, a slice),
// charging the heap before each growth of its buffer.
class ListBuilder {
 public:
  explicit ListBuilder(Heap& heap) : heap_(heap) {}
  ~ListBuilder() { heap_.uncharge(charged_); }
  ListBuilder(const ListBuilder&) = delete;
  ListBuilder& operator=(const ListBuilder&) = delete;

  void reserve(size_t count);
  void push(Value value) {
    if (items_.size() == items_.capacity()) reserve(items_.size() < 4 ? 4 : 2 * items_.size());
    items_.push_back(std::move(value));
  }
  size_t size() const { return items_.size(); }
  std::vector<Value>& items() { return items_; }
  // The list; the builder is empty afterwards.
  Value finish();

 private:
  Heap& heap_;
  std::vector<Value> items_;
  size_t charged_ = 0;
};

// Text being built: the output, what a macro or {% set %} block captures, a
// string a filter or printing builds. Its buffer is charged before it grows.
class TextBuffer {
 public:
  // `max_size`: the most the text will hold (its caller refuses more), so
  // doubling the buffer never overshoots it.
  TextBuffer(Heap& heap, size_t max_size) : heap_(heap), max_size_(max_size) {}
  ~TextBuffer() { heap_.uncharge(charged_); }
  TextBuffer(const TextBuffer&) = delete;
  TextBuffer& operator=(const TextBuffer&) = delete;

  void append(std::string_view text) {
    if (text_.size() + text.size() > text_.capacity()) grow(text_.size() + text.size());
    text_.append(text);
  }
  void append(char c) {
    if (text_.size() == text_.capacity()) grow(text_.size() + 1);
    text_.push_back(c);
  }
  void append(size_t count, char c) {
    if (text_.size() + count > text_.capacity()) grow(text_.size() + count);
    text_.append(count, c);
  }
  void reserve(size_t capacity) {
    if (capacity > text_.capacity()) grow(capacity);
  }
  size_t size() const { return text_.size(); }
  // The bytes so far, for reading or rewriting in place.
  std::string& text() { return text_; }
  // The bytes, no longer charged: they leave the render.
  std::string take();
  // A string value that owns the bytes.
  Value into_value();

 private:
  void grow(size_t at_least);

  Heap& heap_;
  size_t max_size_;
  std::string text_;
  size_t charged_ = 0;
};

// A short-lived buffer's bytes (a vector of views, a parsed copy), charged
// for as long as it lives.
class Scratch {
 public:
  Scratch(Heap& heap, size_t bytes) : heap_(heap), bytes_(block_size(bytes)) { heap_.charge(bytes_); }
  ~Scratch() { heap_.uncharge(bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

 private:
  Heap& heap_;
  size_t bytes_;
};

}  // namespace titan::data::jinja
