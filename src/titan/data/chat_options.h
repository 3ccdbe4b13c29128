// The choices that decide how chat conversations become training tokens
// (chat_dataset.h): which tokens are trained on and what happens to a
// conversation longer than a row. Parsed here, apart from the template engine
// and the tokenizer, so config validation (and its fuzzer) links only this.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace titan::data {

// Which tokens a conversation trains on: the assistant turns' (their content
// and end-of-turn marker), or every token (system and user turns too).
enum class ChatTrainOn { assistant, all };
// A conversation longer than the limit: keep its first tokens, or leave it out.
enum class ChatOverlong { truncate, drop };

// "assistant" or "all"; `key` names the setting in the error ("chat.train_on", "--train-on").
ChatTrainOn parse_chat_train_on(std::string_view name, std::string_view key);
// "truncate" or "drop".
ChatOverlong parse_chat_overlong(std::string_view name, std::string_view key);
const char* chat_train_on_name(ChatTrainOn value);
const char* chat_overlong_name(ChatOverlong value);

struct ChatOptions {
  // "llama3", "qwen3", a tokenizer_config.json or a *.jinja file; "": the
  // tokenizer_config.json beside the tokenizer (an error when there is none).
  std::string chat_template;
  ChatTrainOn train_on = ChatTrainOn::assistant;
  ChatOverlong overlong = ChatOverlong::truncate;
  uint64_t max_tokens = 0;  // > 0: conversations longer than this follow `overlong`
};

}  // namespace titan::data
