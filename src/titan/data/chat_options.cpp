#include "titan/data/chat_options.h"

#include "titan/core/error.h"

namespace titan::data {

ChatTrainOn parse_chat_train_on(std::string_view name, std::string_view key) {
  if (name == "assistant") return ChatTrainOn::assistant;
  if (name == "all") return ChatTrainOn::all;
  fail("{} '{}': expected assistant (train on the assistant turns) or all (every token)", key, name);
}

ChatOverlong parse_chat_overlong(std::string_view name, std::string_view key) {
  if (name == "truncate") return ChatOverlong::truncate;
  if (name == "drop") return ChatOverlong::drop;
  fail("{} '{}': expected truncate (keep a long conversation's first tokens) or drop (leave it out)", key, name);
}

const char* chat_train_on_name(ChatTrainOn value) { return value == ChatTrainOn::all ? "all" : "assistant"; }
const char* chat_overlong_name(ChatOverlong value) { return value == ChatOverlong::drop ? "drop" : "truncate"; }

}  // namespace titan::data
