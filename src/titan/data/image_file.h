// PNG and JPEG files to 8-bit RGB pixels and RGB pixels to PNG, through libpng
// and libjpeg(-turbo), for the image datasets (FLUX). Every error is a
// titan::Error naming the file and what is wrong with it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

// Row-major, interleaved R, G, B bytes: pixel (x, y) channel c is at
// pixels[(y * width + x) * 3 + c].
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;

  uint8_t at(int x, int y, int c) const { return pixels[(static_cast<size_t>(y) * width + x) * 3 + c]; }
  uint8_t& at(int x, int y, int c) { return pixels[(static_cast<size_t>(y) * width + x) * 3 + c]; }
};

// The largest image decoded (width * height): a corrupt or hostile header
// cannot make us allocate gigabytes. 64 Mpx (8192 x 8192) is far above the
// datasets' photographs (CC12M, COCO: a few Mpx).
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

// Decodes PNG or JPEG bytes (told apart by their signature) to RGB, as PIL's
// Image.convert("RGB") would see them (what TorchTitan's FLUX data does):
//  - PNG: grey and palette expand to RGB; alpha (and a tRNS chunk) is dropped,
//    not composited; 16-bit samples keep their high byte; gamma and colour
//    chunks are ignored; interlaced images are de-interlaced.
//  - JPEG: YCbCr and grey convert with libjpeg's default (islow DCT, fancy
//    upsampling, as PIL). CMYK and YCCK convert with Adobe's inverted-CMYK
//    convention, as PIL's CMYK;I -> RGB. A truncated or corrupt stream is an
//    error (libjpeg would only warn and pad with grey); only its warning about
//    extraneous bytes before a marker, common in camera files, is tolerated.
// `name` is the file name used in errors.
RgbImage decode_image(std::string_view bytes, const std::string& name);

// The file's bytes decoded; errors name `path`.
RgbImage read_image(const std::filesystem::path& path);

// An 8-bit RGB PNG (no interlace, default zlib level). `name` is used in errors.
std::string encode_png(const RgbImage& image, const std::string& name);

// encode_png written atomically to `path` (the folder must exist).
void write_png(const std::filesystem::path& path, const RgbImage& image);

}  // namespace titan::data
