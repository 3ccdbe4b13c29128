// libFuzzer entry point: PNG and JPEG decoding (libpng and libjpeg driven
// through titan's setjmp/longjmp error handling), then, for a small decoded
// image, PIL's bicubic resize and a PNG round trip of the pixels.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "titan/core/error.h"
#include "titan/data/image_file.h"
#include "titan/data/image_resize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  titan::data::RgbImage image;
  try {
    image = titan::data::decode_image(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.img");
  } catch (const titan::Error&) {
    return 0;  // refused, as it should be when the bytes are not a whole image
  }
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) {
    std::abort();
  }
  if (static_cast<int64_t>(image.width) * image.height <= 4096) {
    const auto resized = titan::data::resize_bicubic(image, 7, 5);
    if (resized.pixels.size() != 7 * 5 * 3) std::abort();
    const auto back = titan::data::decode_image(titan::data::encode_png(image, "fuzz.png"), "fuzz.png");
    if (back.pixels != image.pixels) std::abort();
  }
  return 0;
}
