// Image files by signature: the PNG and JPEG codecs are in image_png.cpp and
// image_jpeg.cpp.
#include "titan/data/image_file.h"

#include "titan/core/error.h"
#include "titan/data/file_io.h"
#include "titan/data/image_jpeg.h"
#include "titan/data/image_png.h"

namespace titan::data {

RgbImage decode_image(std::string_view bytes, const std::string& name) {
  if (is_png(bytes)) return decode_png(bytes, name);
  if (is_jpeg(bytes)) return decode_jpeg(bytes, name);
  fail("{}: not a PNG or JPEG file ({} bytes that start with neither signature)", name, bytes.size());
}

RgbImage read_image(const std::filesystem::path& path) { return decode_image(read_file(path, "image"), path.string()); }

void write_png(const std::filesystem::path& path, const RgbImage& image) {
  write_file_atomic(path, encode_png(image, path.string()));
}

}  // namespace titan::data
