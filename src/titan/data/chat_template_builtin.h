// The chat templates compiled into titan ("llama3", "qwen3"): our own Jinja
// sources for those models' conversation formats, with their bos/eos tokens
// and the token that closes an assistant turn.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

struct BuiltinChatTemplate {
  std::string_view name;
  std::string_view source;  // Jinja
  std::string_view bos_token;
  std::string_view eos_token;
  std::string_view end_of_turn;
};

// The built-in template called `name`, or null.
const BuiltinChatTemplate* find_builtin_chat_template(std::string_view name);
// "llama3, qwen3", for messages.
std::string builtin_chat_template_names();

}  // namespace titan::data
