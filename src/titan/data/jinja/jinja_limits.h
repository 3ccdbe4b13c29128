// The bounds on one render of a Jinja template, and what a render used. A
// hostile or broken template must end in a clean error within seconds and in
// bounded memory, never in the kernel's OOM killer; the defaults sit far above
// what published Hugging Face chat templates need.
#pragma once

#include <cstddef>

namespace titan::data::jinja {

struct Limits {
  // Bytes of rendered text; also the longest string a template may build or
  // a value may print as.
  size_t max_output = size_t{64} << 20;
  // Work: 16 for each statement, expression and loop iteration (what one
  // costs next to copying a byte), 1 for each byte or item made or scanned;
  // about a second of rendering.
  size_t max_work = size_t{1} << 28;
  // Bytes held at once by the render's strings, lists, dicts and namespaces
  // and by the text being built (output, captured macro or block text,
  // strings filters build), counted as the allocator hands them out: block
  // overhead and spare capacity included. A chat template holds about its
  // conversation plus its output (a few MiB for the longest conversations);
  // 256 MiB also leaves room for the full 64 MiB output twice over.
  size_t max_live_bytes = size_t{256} << 20;
  // Bytes allocated over the whole render, freed or not: a template that
  // builds and drops values stays under max_live_bytes yet can churn for long.
  // Ordinary templates allocate a few times their conversation's size; 2 GiB
  // is about a second of allocating and copying.
  size_t max_allocated_bytes = size_t{2} << 30;
  int max_call_depth = 64;  // nested macro calls
};

// What one render used, filled in whether it succeeded or failed.
struct RenderStats {
  size_t peak_live_bytes = 0;  // the most bytes held at once (see Limits::max_live_bytes)
  size_t allocated_bytes = 0;  // bytes allocated over the render
  size_t work = 0;             // steps counted against Limits::max_work
  // Bytes still held once the render's values are gone and its namespaces
  // emptied (cycles can only close through a namespace): anything but 0 is a
  // leak in the interpreter.
  size_t leaked_bytes = 0;
};

}  // namespace titan::data::jinja
