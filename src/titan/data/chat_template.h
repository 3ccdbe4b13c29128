// Chat templates: how a conversation becomes the text a chat model is trained
// on and prompted with. A template is a Jinja program, as Hugging Face ships it
// in tokenizer_config.json's "chat_template"; titan runs the subset of Jinja
// that published templates use (data/jinja/). The built-in templates ("llama3",
// "qwen3") are our own Jinja sources for those formats, compiled into titan.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

// A piece of a rendered conversation, and whether its tokens are trained on
// (an assistant turn's content and end-of-turn marker) or only context.
struct ChatSegment {
  std::string text;
  bool assistant = false;
};

class ChatTemplate {
 public:
  // "llama3", "qwen3" (built in), a tokenizer_config.json (its "chat_template",
  // "bos_token", "eos_token"), or a *.jinja file. Errors name the file.
  static ChatTemplate load(const std::string& name_or_path);
  // The template that goes with a tokenizer: tokenizer_config.json beside it
  // when that file has a chat_template, else nullptr.
  static std::unique_ptr<ChatTemplate> beside_tokenizer(const std::filesystem::path& tokenizer_path);
  // `source` is Jinja; `origin` names it in errors ("file.json: chat_template line 3: ...").
  ChatTemplate(std::string source, std::string origin, std::string bos_token = "", std::string eos_token = "");
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The template's output for these messages, as Hugging Face's
  // apply_chat_template(tokenize=False) renders it. Roles other than system,
  // user and assistant are a titan::Error naming the role.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // The same text cut into segments: each assistant turn's part (what the
  // conversation up to that turn adds after the generation prompt) is marked
  // assistant. Concatenated, the segments equal render(messages, false).
  // A template whose renders are not prefixes of one another is an error.
  std::vector<ChatSegment> render_segments(std::span<const ChatMessage> messages) const;

  // The special token that closes an assistant turn ("<|eot_id|>", "<|im_end|>"):
  // the text an assistant segment ends with, up to trailing whitespace.
  std::string end_of_turn() const;

  const std::string& origin() const { return origin_; }
  const std::string& source() const { return source_; }

 private:
  struct Program;
  std::string source_, origin_, bos_token_, eos_token_;
  std::unique_ptr<Program> program_;
};

}  // namespace titan::data
