#include "titan/data/chat_template_builtin.h"

namespace titan::data {

namespace {

// Llama 3 instruct: every turn is a header naming the role, a blank line, the
// trimmed content and <|eot_id|>; the conversation opens with bos_token.
constexpr std::string_view kLlama3 = R"jinja({#- titan's Llama 3 chat format -#}
{{- bos_token -}}
{%- for message in messages -%}
    {{- '<|start_header_id|>' ~ message['role'] ~ '<|end_header_id|>\n\n' -}}
    {{- message['content'] | trim -}}
    {{- '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}
)jinja";

// ChatML as Qwen 3 uses it for plain conversations: <|im_start|>role, newline,
// content, <|im_end|> and a newline. An assistant turn in the history renders
// exactly as a new one is generated, so every render is a prefix of the next.
constexpr std::string_view kQwen3 = R"jinja({#- titan's Qwen 3 (ChatML) chat format -#}
{%- for message in messages -%}
    {{- '<|im_start|>' ~ message.role ~ '\n' ~ message.content ~ '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)jinja";

constexpr BuiltinChatTemplate kBuiltins[] = {
    {"llama3", kLlama3, "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"},
    {"qwen3", kQwen3, "", "<|im_end|>", "<|im_end|>"},
};

}  // namespace

const BuiltinChatTemplate* find_builtin_chat_template(std::string_view name) {
  for (const BuiltinChatTemplate& builtin : kBuiltins) {
    if (builtin.name == name) return &builtin;
  }
  return nullptr;
}

std::string builtin_chat_template_names() {
  std::string names;
  for (const BuiltinChatTemplate& builtin : kBuiltins) {
    if (!names.empty()) names += ", ";
    names += builtin.name;
  }
  return names;
}

}  // namespace titan::data
