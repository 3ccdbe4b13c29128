// libpng calls back into image_png_error, which longjmps to the setjmp of the
// phase function that made the call (image_png_read_header, image_png_read_rows,
// image_png_write). Those functions hold only plain pointers and integers, and
// everything with a destructor (the pixel buffer, the row table, the guard that
// frees libpng's structs) lives in their caller, which the jump never leaves.
#include "titan/data/image_png.h"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <new>

#include "titan/core/error.h"

namespace titan::data {
namespace {

// What the callbacks share: the input (reading) or output (writing) and the
// last error message.
struct ImagePngIo {
  const unsigned char* data = nullptr;
  size_t size = 0;
  size_t position = 0;
  std::string* output = nullptr;
  bool out_of_memory = false;
  char message[256] = {};
};

void image_png_error(png_structp png, png_const_charp message) {
  auto* io = static_cast<ImagePngIo*>(png_get_error_ptr(png));
  std::snprintf(io->message, sizeof io->message, "%s", message);
  png_longjmp(png, 1);
}

// libpng's warnings (a bad ancillary chunk's CRC, an unknown sRGB profile)
// leave the pixels intact; PIL ignores them too.
void image_png_warning(png_structp, png_const_charp) {}

void image_png_read(png_structp png, png_bytep out, size_t length) {
  auto* io = static_cast<ImagePngIo*>(png_get_io_ptr(png));
  if (io->size - io->position < length) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, io->data + io->position, length);
  io->position += length;
}

void image_png_write_data(png_structp png, png_bytep data, size_t length) {
  auto* io = static_cast<ImagePngIo*>(png_get_io_ptr(png));
  // An exception must not cross libpng's C frames: note it, then leave by longjmp.
  try {
    io->output->append(reinterpret_cast<const char*>(data), length);
  } catch (const std::bad_alloc&) {
    io->out_of_memory = true;
  }
  if (io->out_of_memory) png_error(png, "out of memory");
}

void image_png_flush(png_structp) {}

// Reads the header and sets the transforms to 8-bit RGB. Returns false after a
// libpng error (the message is in the io struct).
bool image_png_read_header(png_structp png, png_infop info, png_uint_32* width, png_uint_32* height,
                           size_t* row_bytes) {
  if (setjmp(png_jmpbuf(png))) return false;  // NOLINT(cert-err52-cpp): libpng errors by longjmp (file comment)
  png_read_info(png, info);
  const int colour_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  // Palette to RGB also expands tRNS to alpha, which strip_alpha then drops:
  // PIL's convert("RGB") keeps the colours and ignores transparency.
  if (colour_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (colour_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  // The high byte, as PIL's RGB;16B unpacker (not png_set_scale_16's rounding).
  if (bit_depth == 16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (colour_type == PNG_COLOR_TYPE_GRAY || colour_type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  *width = png_get_image_width(png, info);
  *height = png_get_image_height(png, info);
  *row_bytes = png_get_rowbytes(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8) {
    png_error(png, "the transforms did not give 8-bit RGB");
  }
  return true;
}

bool image_png_read_rows(png_structp png, png_infop info, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;  // NOLINT(cert-err52-cpp): libpng errors by longjmp (file comment)
  png_read_image(png, rows);
  // The chunks after the pixels: a file cut after its image data still fails here.
  png_read_end(png, nullptr);
  return true;
}

bool image_png_write(png_structp png, png_infop info, png_uint_32 width, png_uint_32 height, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;  // NOLINT(cert-err52-cpp): libpng errors by longjmp (file comment)
  png_set_IHDR(png, info, width, height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  return true;
}

struct ImagePngReadGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~ImagePngReadGuard() { png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr); }
};

struct ImagePngWriteGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~ImagePngWriteGuard() { png_destroy_write_struct(&png, info != nullptr ? &info : nullptr); }
};

}  // namespace

bool is_png(std::string_view bytes) {
  return bytes.size() >= 8 && png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8) == 0;
}

RgbImage decode_png(std::string_view bytes, const std::string& name) {
  ImagePngIo io;
  io.data = reinterpret_cast<const unsigned char*>(bytes.data());
  io.size = bytes.size();
  ImagePngReadGuard guard;
  guard.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, image_png_error, image_png_warning);
  TITAN_CHECK(guard.png != nullptr, "{}: cannot start libpng (out of memory)", name);
  guard.info = png_create_info_struct(guard.png);
  TITAN_CHECK(guard.info != nullptr, "{}: cannot start libpng (out of memory)", name);
  png_set_read_fn(guard.png, &io, image_png_read);
  // libpng's own limit, so a hostile header is refused before any allocation.
  png_set_user_limits(guard.png, 1u << 16, 1u << 16);

  png_uint_32 width = 0, height = 0;
  size_t row_bytes = 0;
  if (!image_png_read_header(guard.png, guard.info, &width, &height, &row_bytes)) {
    fail("{}: corrupt or truncated PNG: {}", name, io.message);
  }
  TITAN_CHECK(static_cast<int64_t>(width) * height <= kMaxImagePixels,
              "{}: the PNG is {}x{} pixels, more than the {} titan decodes", name, width, height, kMaxImagePixels);
  TITAN_CHECK(row_bytes == static_cast<size_t>(width) * 3, "{}: unexpected PNG row size {} for width {}", name,
              row_bytes, width);

  RgbImage image;
  image.width = static_cast<int>(width);
  image.height = static_cast<int>(height);
  image.pixels.resize(static_cast<size_t>(width) * height * 3);
  std::vector<png_bytep> rows(height);
  for (png_uint_32 y = 0; y < height; ++y) rows[y] = image.pixels.data() + static_cast<size_t>(y) * row_bytes;
  if (!image_png_read_rows(guard.png, guard.info, rows.data())) {
    fail("{}: corrupt or truncated PNG: {}", name, io.message);
  }
  return image;
}

std::string encode_png(const RgbImage& image, const std::string& name) {
  TITAN_CHECK(image.width > 0 && image.height > 0, "{}: cannot write an empty {}x{} image", name, image.width,
              image.height);
  TITAN_CHECK(image.pixels.size() == static_cast<size_t>(image.width) * image.height * 3,
              "{}: {} bytes do not make a {}x{} RGB image", name, image.pixels.size(), image.width, image.height);
  std::string output;
  ImagePngIo io;
  io.output = &output;
  ImagePngWriteGuard guard;
  guard.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &io, image_png_error, image_png_warning);
  TITAN_CHECK(guard.png != nullptr, "{}: cannot start libpng (out of memory)", name);
  guard.info = png_create_info_struct(guard.png);
  TITAN_CHECK(guard.info != nullptr, "{}: cannot start libpng (out of memory)", name);
  png_set_write_fn(guard.png, &io, image_png_write_data, image_png_flush);
  std::vector<png_bytep> rows(static_cast<size_t>(image.height));
  // libpng's row type is not const; it only reads the rows it is given.
  auto* pixels = const_cast<png_bytep>(image.pixels.data());
  for (int y = 0; y < image.height; ++y) rows[y] = pixels + static_cast<size_t>(y) * image.width * 3;
  if (!image_png_write(guard.png, guard.info, static_cast<png_uint_32>(image.width),
                       static_cast<png_uint_32>(image.height), rows.data())) {
    fail("{}: cannot encode the PNG: {}", name, io.message);
  }
  return output;
}

}  // namespace titan::data
