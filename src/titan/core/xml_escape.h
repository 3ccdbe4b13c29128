// Text placed in HTML or SVG (module names, run names, titles): the five
// characters markup gives meaning to, as entities.
#pragma once

#include <string>
#include <string_view>

namespace titan {

std::string xml_escape(std::string_view text);

}  // namespace titan
