// titan's Jinja subset: a parsed template and its renderer. It covers what
// published Hugging Face chat templates use (see data/chat_template.h): text,
// {{ }}, {% if/for/set/macro %}, whitespace control, filters, tests, string and
// dict methods, namespace(), raise_exception(). Every error, syntax or runtime,
// is a titan::Error "<where> line N: <message>". Rendering is bounded (output
// size, work, memory held and allocated, recursion: jinja_limits.h) so a
// hostile template fails quickly instead of hanging or exhausting memory.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "titan/data/jinja/jinja_ast.h"
#include "titan/data/jinja/jinja_limits.h"

namespace titan::data::jinja {

class Template {
 public:
  // Parses `source`; `where` prefixes errors ("tokenizer_config.json: chat_template").
  Template(std::string_view source, std::string where);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `variables` (a JSON object) as the template's variables.
  // When `stats` is given it receives what the render used, even if it fails.
  std::string render(const nlohmann::ordered_json& variables, const Limits& limits = {},
                     RenderStats* stats = nullptr) const;

  const std::string& where() const { return where_; }

 private:
  std::string where_;
  Body body_;
};

}  // namespace titan::data::jinja
