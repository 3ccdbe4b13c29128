// titan's Jinja subset: a parsed template and its renderer. It covers what
// published Hugging Face chat templates use (see data/chat_template.h): text,
// {{ }}, {% if/for/set/macro %}, whitespace control, filters, tests, string and
// dict methods, namespace(), raise_exception(). Every error, syntax or runtime,
// is a titan::Error "<where> line N: <message>". Rendering is bounded (output
// size, work, recursion) so a hostile template fails instead of hanging.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "titan/data/jinja/jinja_ast.h"

namespace titan::data::jinja {

struct Limits {
  size_t max_output = size_t{64} << 20;  // bytes of rendered text
  size_t max_work = size_t{1} << 28;     // loop iterations, evaluations and bytes or items created
  int max_call_depth = 64;               // nested macro calls
};

class Template {
 public:
  // Parses `source`; `where` prefixes errors ("tokenizer_config.json: chat_template").
  Template(std::string_view source, std::string where);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `variables` (a JSON object) as the template's variables.
  std::string render(const nlohmann::ordered_json& variables, const Limits& limits = {}) const;

  const std::string& where() const { return where_; }

 private:
  std::string where_;
  Body body_;
};

}  // namespace titan::data::jinja
