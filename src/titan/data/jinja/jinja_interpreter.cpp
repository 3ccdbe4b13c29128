// Template's entry points: parsing a source into its syntax tree, and rendering
// it on a fresh Heap with a Renderer (jinja_renderer.h), reporting what it used.
#include "titan/data/jinja/jinja_interpreter.h"

#include <fmt/format.h>

#include "titan/core/error.h"
#include "titan/data/jinja/jinja_heap.h"
#include "titan/data/jinja/jinja_lexer.h"
#include "titan/data/jinja/jinja_parser.h"
#include "titan/data/jinja/jinja_renderer.h"

namespace titan::data::jinja {

Template::Template(std::string_view source, std::string where) : where_(std::move(where)) {
  body_ = parse(tokenize(source, where_), where_);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& variables, const Limits& limits, RenderStats* stats) const {
  Heap heap(limits);
  // Runs after the renderer's values are gone, whether the render succeeded
  // or threw: empties the namespaces (breaking cycles) and reports.
  struct Report {
    Heap& heap;
    RenderStats* stats;
    ~Report() {
      heap.collect();
      if (stats != nullptr) *stats = heap.stats();
    }
  } report{heap, stats};
  detail::Renderer renderer(where_, limits, heap);
  try {
    return renderer.run(body_, variables);
  } catch (const ValueError& error) {
    // Raised outside any statement (reading the variables): no line to name.
    throw Error(fmt::format("{}: {}", where_, error.what()));
  }
}

}  // namespace titan::data::jinja
