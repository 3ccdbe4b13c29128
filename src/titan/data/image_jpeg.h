// JPEG through libjpeg(-turbo): decoding to 8-bit RGB with PIL's conversions.
// libjpeg reports errors through its error_exit callback, which longjmps; the
// .cpp keeps every setjmp in a frame that holds no C++ object.
#pragma once

#include <string>
#include <string_view>

#include "titan/data/image_file.h"

namespace titan::data {

// True when `bytes` start with a JPEG start-of-image marker.
bool is_jpeg(std::string_view bytes);

// See decode_image (image_file.h) for the conversions; errors name `name`.
RgbImage decode_jpeg(std::string_view bytes, const std::string& name);

}  // namespace titan::data
