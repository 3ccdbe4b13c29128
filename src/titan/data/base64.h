// Standard base64 (RFC 4648, with padding), as tiktoken rank files store tokens.
#pragma once

#include <string>
#include <string_view>

namespace titan::data {

std::string base64_encode(std::string_view bytes);

// Appends the decoded bytes to `out`; false on a character outside the
// alphabet, bad padding or a length that is not a multiple of 4.
bool base64_decode(std::string_view text, std::string& out);

}  // namespace titan::data
