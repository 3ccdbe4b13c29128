// PNG through libpng: decoding any PNG to 8-bit RGB and encoding 8-bit RGB.
// libpng reports errors by longjmp; the .cpp keeps every setjmp in a frame
// that holds no C++ object, so no destructor is ever skipped.
#pragma once

#include <string>
#include <string_view>

#include "titan/data/image_file.h"

namespace titan::data {

// True when `bytes` start with the PNG signature.
bool is_png(std::string_view bytes);

// See decode_image (image_file.h) for the conversions; errors name `name`.
RgbImage decode_png(std::string_view bytes, const std::string& name);
// encode_png is declared in image_file.h.

}  // namespace titan::data
