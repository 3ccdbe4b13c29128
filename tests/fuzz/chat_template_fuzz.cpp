// libFuzzer entry point: chat templates (data/jinja/). Any bytes are parsed as
// a Jinja template and rendered over a fixed conversation; the only allowed
// failure is titan::Error. Small limits keep runaway loops, huge outputs and
// deep recursion from looking like hangs: they must end in a clean error.
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
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const titan::data::jinja::Template chat_template(source, "fuzz.jinja: chat_template");
    (void)chat_template.render(variables, limits);
  } catch (const titan::Error&) {
  }
  return 0;
}
