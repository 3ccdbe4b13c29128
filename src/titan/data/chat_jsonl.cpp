#include "titan/data/chat_jsonl.h"

#include <nlohmann/json.hpp>

#include "titan/core/error.h"

namespace titan::data {
namespace {

using json = nlohmann::json;

std::string string_field(const json& object, const char* key, std::string_view where, std::string_view what) {
  const auto it = object.find(key);
  TITAN_CHECK(it != object.end(), "{}: {} has no \"{}\"", where, what, key);
  TITAN_CHECK(it->is_string(), "{}: {} \"{}\" must be a string, not {}", where, what, key, it->type_name());
  return it->get<std::string>();
}

}  // namespace

std::vector<ChatMessage> parse_chat_line(std::string_view line, std::string_view where) {
  json root;
  try {
    root = json::parse(line);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", where, e.what());
  }
  TITAN_CHECK(root.is_object(), "{}: expected a JSON object, not {}", where, root.type_name());
  std::vector<ChatMessage> messages;
  if (const auto list = root.find("messages"); list != root.end()) {
    TITAN_CHECK(list->is_array(), "{}: \"messages\" must be an array, not {}", where, list->type_name());
    for (size_t i = 0; i < list->size(); ++i) {
      const json& message = (*list)[i];
      const std::string what = fmt::format("messages[{}]", i);
      TITAN_CHECK(message.is_object(), "{}: {} must be an object with \"role\" and \"content\"", where, what);
      ChatMessage parsed{string_field(message, "role", where, what), string_field(message, "content", where, what)};
      TITAN_CHECK(parsed.role == "system" || parsed.role == "user" || parsed.role == "assistant",
                  "{}: {} has role '{}': expected system, user or assistant", where, what, parsed.role);
      messages.push_back(std::move(parsed));
    }
    TITAN_CHECK(!messages.empty(), "{}: \"messages\" is empty: a conversation needs at least one turn", where);
    return messages;
  }
  TITAN_CHECK(root.contains("prompt") || root.contains("completion"),
              "{}: expected \"messages\" (a list of turns) or \"prompt\" and \"completion\"", where);
  if (root.contains("system")) messages.push_back({"system", string_field(root, "system", where, "the line")});
  messages.push_back({"user", string_field(root, "prompt", where, "the line")});
  messages.push_back({"assistant", string_field(root, "completion", where, "the line")});
  return messages;
}

}  // namespace titan::data
