// libjpeg calls error_exit (and emit_message for warnings) on bad input; ours
// longjmp to the setjmp of the phase function that made the call
// (image_jpeg_start, image_jpeg_read_rows). Those functions hold only plain
// pointers and integers; the pixel buffer and the guard that destroys the
// decompressor live in their caller, which the jump never leaves.
#include "titan/data/image_jpeg.h"

// jpeglib.h needs size_t and FILE declared before it.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <csetjmp>

#include "titan/core/error.h"

namespace titan::data {
namespace {

// libjpeg hands error_exit the jpeg_error_mgr; it is the first member, so the
// callback finds the rest of this struct from it.
struct ImageJpegErrors {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void image_jpeg_error_exit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<ImageJpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);  // NOLINT(cert-err52-cpp): libjpeg protocol (file comment)
}

// Level -1 is a warning about the data: a premature end (libjpeg pads the rest
// with grey), a corrupt segment. Those are errors here, as PIL raises on a
// truncated file. Extraneous bytes before a marker are common in camera files
// and harm nothing. Levels >= 0 are trace messages.
void image_jpeg_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0 || cinfo->err->msg_code == JWRN_EXTRANEOUS_DATA) return;
  image_jpeg_error_exit(cinfo);
}

enum class ImageJpegStart { ok, failed, too_large, unsupported_colour };

// Parses the header, picks the output colour space and starts decompressing.
ImageJpegStart image_jpeg_start(jpeg_decompress_struct* cinfo, ImageJpegErrors* errors, const unsigned char* data,
                                unsigned long size) {
  if (setjmp(errors->jump)) return ImageJpegStart::failed;  // NOLINT(cert-err52-cpp): libjpeg protocol
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, size);
  jpeg_read_header(cinfo, TRUE);
  if (static_cast<int64_t>(cinfo->image_width) * cinfo->image_height > kMaxImagePixels) {
    return ImageJpegStart::too_large;
  }
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
      cinfo->out_color_space = JCS_RGB;
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      cinfo->out_color_space = JCS_CMYK;
      break;
    default:
      return ImageJpegStart::unsupported_colour;
  }
  jpeg_start_decompress(cinfo);
  return ImageJpegStart::ok;
}

bool image_jpeg_read_rows(jpeg_decompress_struct* cinfo, ImageJpegErrors* errors, unsigned char* pixels,
                          size_t row_bytes) {
  if (setjmp(errors->jump)) return false;  // NOLINT(cert-err52-cpp): libjpeg protocol
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = pixels + static_cast<size_t>(cinfo->output_scanline) * row_bytes;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

struct ImageJpegGuard {
  jpeg_decompress_struct cinfo{};
  // jpeg_destroy_decompress frees whatever was allocated, also after an error
  // part-way through creation (it checks the memory manager is there).
  ~ImageJpegGuard() { jpeg_destroy_decompress(&cinfo); }
};

// (a * b) / 255 rounded, as PIL's MULDIV255.
inline int image_jpeg_muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

}  // namespace

bool is_jpeg(std::string_view bytes) {
  return bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xFF &&
         static_cast<unsigned char>(bytes[1]) == 0xD8 && static_cast<unsigned char>(bytes[2]) == 0xFF;
}

RgbImage decode_jpeg(std::string_view bytes, const std::string& name) {
  ImageJpegErrors errors{};
  ImageJpegGuard guard;
  guard.cinfo.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = image_jpeg_error_exit;
  errors.manager.emit_message = image_jpeg_emit_message;

  switch (image_jpeg_start(&guard.cinfo, &errors, reinterpret_cast<const unsigned char*>(bytes.data()),
                           static_cast<unsigned long>(bytes.size()))) {
    case ImageJpegStart::ok:
      break;
    case ImageJpegStart::failed:
      fail("{}: corrupt or truncated JPEG: {}", name, errors.message);
    case ImageJpegStart::too_large:
      fail("{}: the JPEG is {}x{} pixels, more than the {} titan decodes", name, guard.cinfo.image_width,
           guard.cinfo.image_height, kMaxImagePixels);
    case ImageJpegStart::unsupported_colour:
      fail("{}: the JPEG's colour space (libjpeg J_COLOR_SPACE {}) is not grey, YCbCr, RGB, CMYK or YCCK", name,
           static_cast<int>(guard.cinfo.jpeg_color_space));
  }
  const auto& cinfo = guard.cinfo;
  const size_t width = cinfo.output_width, height = cinfo.output_height;
  const int components = cinfo.output_components;
  TITAN_CHECK(components == 3 || components == 4, "{}: libjpeg gave {} components per pixel", name, components);
  std::vector<unsigned char> decoded(width * height * static_cast<size_t>(components));
  if (!image_jpeg_read_rows(&guard.cinfo, &errors, decoded.data(), width * static_cast<size_t>(components))) {
    fail("{}: corrupt or truncated JPEG: {}", name, errors.message);
  }

  RgbImage image;
  image.width = static_cast<int>(width);
  image.height = static_cast<int>(height);
  if (components == 3) {
    image.pixels = std::move(decoded);
    return image;
  }
  // CMYK as Adobe (Photoshop) writes it: every channel inverted, 255 = no ink.
  // PIL reads it so (rawmode CMYK;I) and converts with r = (255 - k) - (c * (255 - k)) / 255.
  image.pixels.resize(width * height * 3);
  for (size_t i = 0; i < width * height; ++i) {
    const unsigned char* cmyk = &decoded[i * 4];
    const int no_black = cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const int ink = 255 - cmyk[c];
      image.pixels[i * 3 + c] = static_cast<uint8_t>(no_black - image_jpeg_muldiv255(ink, no_black));
    }
  }
  return image;
}

}  // namespace titan::data
