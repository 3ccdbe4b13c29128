// The parser of titan's Jinja subset: tokens become a syntax tree, with
// Jinja's operator precedence (filters and tests bind tightest, then ** ,
// * / // %, ~, + -, comparisons, not, and, or, the conditional expression).
#pragma once

#include <string>
#include <vector>

#include "titan/data/jinja/jinja_ast.h"
#include "titan/data/jinja/jinja_lexer.h"

namespace titan::data::jinja {

// The template's statements; syntax errors are titan::Error "<where> line N: ...".
Body parse(const std::vector<Token>& tokens, const std::string& where);

}  // namespace titan::data::jinja
