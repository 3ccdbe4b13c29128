// libFuzzer entry point: chat templates (data/jinja/). Any bytes are parsed as
// a Jinja template and rendered over a fixed conversation; the only allowed
// failure is titan::Error. Small limits keep runaway loops, huge outputs and
// deep recursion from looking like hangs, and growing or churning memory from
// looking like a leak: they must end in a clean error. The Makefile runs this
// target with a low RSS and per-allocation limit, so memory the limits fail to
// bound fails the fuzzer; a render must also give back all it counted.
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/data/jinja/jinja_interpreter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json variables = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": " Hi 日本 😀 \"q\" \\ \n"},
      {"role": "assistant", "content": "Hello."},
      {"role": "user", "content": ""}
    ],
    "tools": null, "documents": null, "add_generation_prompt": true,
    "bos_token": "<s>", "eos_token": "</s>"
  })");
  titan::data::jinja::Limits limits;
  limits.max_output = 1 << 20;
  limits.max_work = 1 << 21;
  limits.max_call_depth = 32;
  limits.max_live_bytes = size_t{32} << 20;
  limits.max_allocated_bytes = size_t{256} << 20;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  titan::data::jinja::RenderStats stats;
  try {
    const titan::data::jinja::Template chat_template(source, "fuzz.jinja: chat_template");
    (void)chat_template.render(variables, limits, &stats);
  } catch (const titan::Error&) {
  }
  // The heap's own count of what it still holds after the render: any byte
  // left is a reference-counting bug, even where LeakSanitizer sees none.
  if (stats.leaked_bytes != 0 || stats.peak_live_bytes > limits.max_live_bytes) __builtin_trap();
  return 0;
}
