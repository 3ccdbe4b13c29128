// libFuzzer entry point: one line of a chat dataset (data/chat_jsonl.h). Any
// input is either a conversation of known roles with string contents, or a
// titan::Error naming where it came from.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "titan/core/error.h"
#include "titan/data/chat_jsonl.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  try {
    const auto messages = titan::data::parse_chat_line(line, "fuzz.jsonl:1");
    if (messages.empty()) std::abort();
    for (const auto& message : messages) {
      if (message.role != "system" && message.role != "user" && message.role != "assistant") std::abort();
    }
  } catch (const titan::Error& e) {
    if (std::string_view(e.what()).rfind("fuzz.jsonl:1: ", 0) != 0) std::abort();  // errors name file:line
  }
  return 0;
}
