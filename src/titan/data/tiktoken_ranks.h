// Parsers for tiktoken's rank data: the rank files tiktoken and Meta ship
// ("<base64 token> <rank>" per line) and the packed form the npm `tiktoken`
// package stores in encoders/*.json ("! <first rank> <base64> <base64> ...").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

// Tokens indexed by rank (empty where a rank is unused). Errors name `source`
// and the line: bad base64, a bad or repeated rank, a repeated token.
std::vector<std::string> parse_tiktoken_ranks(std::string_view content, std::string_view source);
std::vector<std::string> parse_tiktoken_packed_ranks(std::string_view content, std::string_view source);

}  // namespace titan::data
