// One line of a chat dataset in JSONL, the two shapes Hugging Face's TRL
// reads: {"messages": [{"role": ..., "content": ...}, ...]}, or
// {"prompt": ..., "completion": ...} (with an optional "system"), which is a
// user turn answered by an assistant turn. Kept apart from the template and
// the tokenizer so its fuzzer links only JSON.
#pragma once

#include <string_view>
#include <vector>

#include "titan/data/chat_template.h"

namespace titan::data {

// The conversation on one line. Errors start with `where` ("file.jsonl:12"):
// malformed JSON, a missing or non-string role or content, a role other than
// system, user and assistant, an empty conversation.
std::vector<ChatMessage> parse_chat_line(std::string_view line, std::string_view where);

}  // namespace titan::data
