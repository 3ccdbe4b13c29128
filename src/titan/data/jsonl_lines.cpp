#include "titan/data/jsonl_lines.h"

namespace titan::data {

void for_each_jsonl_line(std::string_view content,
                         const std::function<void(std::string_view text, size_t line)>& visit) {
  size_t pos = 0, line = 0;
  while (pos < content.size()) {
    ++line;
    const size_t newline = content.find('\n', pos);
    const size_t end = newline == std::string_view::npos ? content.size() : newline;
    const std::string_view text = content.substr(pos, end - pos);
    pos = end + 1;
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    visit(text, line);
  }
}

}  // namespace titan::data
