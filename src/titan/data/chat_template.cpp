#include "titan/data/chat_template.h"

#include <fmt/format.h>

#include <cctype>
#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/data/chat_template_builtin.h"
#include "titan/data/file_io.h"
#include "titan/data/jinja/jinja_interpreter.h"

namespace titan::data {

struct ChatTemplate::Program {
  jinja::Template jinja;
  std::string end_of_turn;  // known for the built-ins; derived otherwise
};

namespace {

// Content no real conversation holds: end_of_turn() finds what follows it.
constexpr std::string_view kReplyMarker = "titan-reply-7f3a9c";

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// A special token in tokenizer_config.json: a string or {"content": ...}.
std::string special_token(const nlohmann::json& config, const char* key, const std::string& origin) {
  const auto found = config.find(key);
  if (found == config.end() || found->is_null()) return "";
  if (found->is_string()) return found->get<std::string>();
  if (found->is_object() && found->contains("content") && (*found)["content"].is_string()) {
    return (*found)["content"].get<std::string>();
  }
  fail("{}: \"{}\" must be a string or an object with a string \"content\"", origin, key);
}

nlohmann::json read_config(const std::filesystem::path& path) {
  const std::string text = read_file(path, "tokenizer config");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    fail("{}: not valid JSON: {}", path.string(), error.what());
  }
}

// The "chat_template" of a parsed tokenizer_config.json: a string, or Hugging
// Face's list of {"name", "template"} (the one named "default"). Empty if none.
std::string config_chat_template(const nlohmann::json& config, const std::string& origin) {
  TITAN_CHECK(config.is_object(), "{}: expected a JSON object", origin);
  const auto found = config.find("chat_template");
  if (found == config.end() || found->is_null()) return "";
  if (found->is_string()) return found->get<std::string>();
  TITAN_CHECK(found->is_array(), "{}: \"chat_template\" must be a string or a list of {{\"name\", \"template\"}}",
              origin);
  std::vector<std::string> names;
  for (const auto& entry : *found) {
    TITAN_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                    entry.contains("template") && entry["template"].is_string(),
                "{}: each \"chat_template\" list entry needs a string \"name\" and \"template\"", origin);
    if (entry["name"] == "default") return entry["template"].get<std::string>();
    names.push_back(entry["name"].get<std::string>());
  }
  fail("{}: \"chat_template\" lists no template named \"default\" (it has: {})", origin, fmt::join(names, ", "));
}

ChatTemplate from_config(const nlohmann::json& config, const std::filesystem::path& path) {
  const std::string origin = path.string();
  std::string source = config_chat_template(config, origin);
  TITAN_CHECK(!source.empty(), "{}: has no \"chat_template\"", origin);
  return ChatTemplate(std::move(source), origin, special_token(config, "bos_token", origin),
                      special_token(config, "eos_token", origin));
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string origin, std::string bos_token, std::string eos_token)
    : source_(std::move(source)),
      origin_(std::move(origin)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)) {
  program_ = std::make_unique<Program>(Program{jinja::Template(source_, origin_ + ": chat_template"), ""});
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

ChatTemplate ChatTemplate::load(const std::string& name_or_path) {
  if (const BuiltinChatTemplate* builtin = find_builtin_chat_template(name_or_path)) {
    ChatTemplate chat(std::string(builtin->source), "built-in chat template " + name_or_path,
                      std::string(builtin->bos_token), std::string(builtin->eos_token));
    chat.program_->end_of_turn = std::string(builtin->end_of_turn);
    return chat;
  }
  std::filesystem::path path(name_or_path);
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) path /= "tokenizer_config.json";
  TITAN_CHECK(std::filesystem::exists(path, error), "chat template {}: not a built-in template ({}) and no such file",
              name_or_path, builtin_chat_template_names());
  if (ends_with(path.string(), ".jinja")) {
    return ChatTemplate(read_file(path, "chat template"), path.string());
  }
  return from_config(read_config(path), path);
}

std::unique_ptr<ChatTemplate> ChatTemplate::beside_tokenizer(const std::filesystem::path& tokenizer_path) {
  std::error_code error;
  const std::filesystem::path folder =
      std::filesystem::is_directory(tokenizer_path, error) ? tokenizer_path : tokenizer_path.parent_path();
  const std::filesystem::path config_path = folder / "tokenizer_config.json";
  if (!std::filesystem::exists(config_path, error)) return nullptr;
  const nlohmann::json config = read_config(config_path);
  if (config_chat_template(config, config_path.string()).empty()) return nullptr;
  return std::make_unique<ChatTemplate>(from_config(config, config_path));
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  nlohmann::ordered_json variables;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    TITAN_CHECK(message.role == "system" || message.role == "user" || message.role == "assistant",
                "{}: message {} has role '{}'; a conversation holds system, user and assistant messages", origin_, i,
                message.role);
    list.push_back({{"role", message.role}, {"content", message.content}});
  }
  // The variables Hugging Face's apply_chat_template passes (tools and documents unset).
  variables["messages"] = std::move(list);
  variables["tools"] = nullptr;
  variables["documents"] = nullptr;
  variables["add_generation_prompt"] = add_generation_prompt;
  variables["bos_token"] = bos_token_;
  variables["eos_token"] = eos_token_;
  return program_->jinja.render(variables);
}

std::vector<ChatSegment> ChatTemplate::render_segments(std::span<const ChatMessage> messages) const {
  std::vector<ChatSegment> segments;
  size_t done = 0;  // bytes of the conversation's text already in segments
  const auto check_prefix = [&](const std::string& text, const std::string& prefix, size_t index) {
    TITAN_CHECK(text.compare(0, prefix.size(), prefix) == 0 && text.size() >= prefix.size(),
                "{}: the template is not prefix-stable at message {}: rendering more of the conversation changes "
                "text already rendered",
                origin_, index);
  };
  std::string previous;  // the text segments cover so far
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    const std::string prefix = render(messages.subspan(0, i), true);
    const std::string upto = render(messages.subspan(0, i + 1), false);
    check_prefix(prefix, previous, i);
    check_prefix(upto, prefix, i);
    if (prefix.size() > done) segments.push_back({prefix.substr(done), false});
    if (upto.size() > prefix.size()) segments.push_back({upto.substr(prefix.size()), true});
    done = upto.size();
    previous = upto;
  }
  const std::string all = render(messages, false);
  check_prefix(all, previous, messages.size());
  if (all.size() > done) segments.push_back({all.substr(done), false});
  return segments;
}

std::string ChatTemplate::end_of_turn() const {
  if (!program_->end_of_turn.empty()) return program_->end_of_turn;
  const ChatMessage probe[] = {{"user", "x"}, {"assistant", std::string(kReplyMarker)}};
  for (const ChatSegment& segment : render_segments(probe)) {
    if (!segment.assistant) continue;
    const size_t at = segment.text.find(kReplyMarker);
    if (at == std::string::npos) break;
    std::string_view tail = std::string_view(segment.text).substr(at + kReplyMarker.size());
    while (!tail.empty() && std::isspace(static_cast<unsigned char>(tail.front()))) tail.remove_prefix(1);
    while (!tail.empty() && std::isspace(static_cast<unsigned char>(tail.back()))) tail.remove_suffix(1);
    TITAN_CHECK(!tail.empty(), "{}: the template closes an assistant turn with no end-of-turn token", origin_);
    return std::string(tail);
  }
  fail("{}: cannot find the end-of-turn token: an assistant turn's content does not appear in its own segment",
       origin_);
}

}  // namespace titan::data
