// Walking the lines of a JSONL file: the one place that splits at "\n",
// counts line numbers for error messages and skips blank lines, for the
// corpus, chat dataset and --messages readers.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace titan::data {

// Calls `visit` with each line of `content` that holds more than spaces, tabs
// and "\r" (without its "\n"; a trailing "\r" is kept), and its 1-based line
// number, so errors can name file:line.
void for_each_jsonl_line(std::string_view content,
                         const std::function<void(std::string_view text, size_t line)>& visit);

}  // namespace titan::data
