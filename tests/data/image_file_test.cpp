// PNG/JPEG decoding, PNG writing, PIL's bicubic resize and TorchTitan's square
// FLUX tensors, each against PIL (tests/reference/pil_images.py: PIL writes the
// files, decodes and resizes them, and runs TorchTitan's processing), and the
// refusals of truncated, corrupt and oversized files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>

#include "peer_support.h"
#include "support/expect_error.h"
#include "titan/data/image_file.h"
#include "titan/data/image_resize.h"
#include "titan/data/image_tensor.h"

namespace titan::data {
namespace image_file_test {

using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;
using titan::testing::expect_error;

RgbImage raw_image(const std::filesystem::path& path, int width, int height) {
  RgbImage image;
  image.width = width;
  image.height = height;
  const std::string bytes = read_bytes(path);
  EXPECT_EQ(bytes.size(), static_cast<size_t>(width) * height * 3) << path;
  image.pixels.assign(bytes.begin(), bytes.end());
  return image;
}

// The largest per-sample difference; the shapes must already agree.
int max_level_difference(const RgbImage& a, const RgbImage& b) {
  int worst = 0;
  for (size_t i = 0; i < a.pixels.size() && i < b.pixels.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<int>(a.pixels[i]) - static_cast<int>(b.pixels[i])));
  }
  return worst;
}

// The PIL reference files, made once for the suite. A PNG written by titan is
// left in the folder first, for PIL to read back.
class PilImages : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    RgbImage written;
    written.width = 29;
    written.height = 11;
    for (int i = 0; i < 29 * 11 * 3; ++i) written.pixels.push_back(static_cast<uint8_t>((i * 37 + i / 7) % 256));
    write_png(dir_->path() / "titan_written.png", written);
    written_ = written;
    const auto result = testing::run_command(
        "/usr/bin/python3 " + testing::shell_quote(std::string(TITAN_SOURCE_DIR) + "/tests/reference/pil_images.py") +
        " " + testing::shell_quote(dir_->path().string()));
    ASSERT_EQ(result.exit_code, 0) << "pil_images.py failed (python3-pil and python3-numpy come from "
                                      "scripts/setup.sh):\n"
                                   << result.output;
    manifest_ = new nlohmann::json(nlohmann::json::parse(read_bytes(dir_->path() / "manifest.json")));
  }
  static void TearDownTestSuite() {
    delete manifest_;
    delete dir_;
    manifest_ = nullptr;
    dir_ = nullptr;
  }
  static std::filesystem::path path(const std::string& name) { return dir_->path() / name; }

  static inline TempDir* dir_ = nullptr;
  static inline nlohmann::json* manifest_ = nullptr;
  static inline RgbImage written_;
};

// Every PNG colour type and depth (palette with and without tRNS, 1-bit grey,
// 16-bit, alpha, Adam7) and every JPEG layout (4:2:0, 4:2:2, 4:4:4,
// progressive, grey, CMYK) decodes to exactly PIL's convert("RGB") bytes:
// PIL decodes JPEG with the same libjpeg-turbo and the same settings (islow
// DCT, fancy upsampling), so there is no reason for even one level of
// difference, and none is allowed.
TEST_F(PilImages, DecodesEveryLayoutAsPil) {
  ASSERT_NE(manifest_, nullptr);
  const auto& cases = (*manifest_)["decode"];
  ASSERT_GE(cases.size(), 19u);
  for (const auto& entry : cases) {
    const std::string file = entry["file"];
    SCOPED_TRACE(file + " against " + entry["reference"].get<std::string>());
    const RgbImage decoded = read_image(path(file));
    const RgbImage expected = raw_image(path(entry["expected"]), entry["width"], entry["height"]);
    ASSERT_EQ(decoded.width, expected.width);
    ASSERT_EQ(decoded.height, expected.height);
    EXPECT_EQ(max_level_difference(decoded, expected), 0);
  }
}

// titan's PNG writer: PIL reads back the bytes titan wrote.
TEST_F(PilImages, PilReadsTheWrittenPng) {
  ASSERT_NE(manifest_, nullptr);
  const RgbImage pil = raw_image(path("titan_written.png.rgb"), written_.width, written_.height);
  EXPECT_EQ(pil.pixels, written_.pixels);
  EXPECT_EQ(read_image(path("titan_written.png")).pixels, written_.pixels);
}

// PIL's default (bicubic) resize, bit for bit: shrinking by whole and odd
// factors, enlarging, one side or neither changed, on noise (whose overshoot
// clips) and on smooth images. The arithmetic is PIL's fixed point, so any
// difference would be a wrong tap, weight or rounding.
TEST_F(PilImages, ResizesExactlyAsPil) {
  ASSERT_NE(manifest_, nullptr);
  const auto& cases = (*manifest_)["resize"];
  ASSERT_GE(cases.size(), 18u);
  for (const auto& entry : cases) {
    SCOPED_TRACE(entry.dump());
    const RgbImage input = raw_image(path(entry["input"]), entry["in_width"], entry["in_height"]);
    const RgbImage expected = raw_image(path(entry["expected"]), entry["width"], entry["height"]);
    const RgbImage resized = resize_bicubic(input, entry["width"], entry["height"]);
    ASSERT_EQ(resized.width, expected.width);
    ASSERT_EQ(resized.height, expected.height);
    EXPECT_EQ(max_level_difference(resized, expected), 0);
  }
}

// load_image_tensor against TorchTitan's _process_cc12m_image (its random
// crop offset replaced by the centre): sizes, crop, conversion and float
// values equal to the last bit, for landscape, portrait, grey and enlarged sources.
TEST_F(PilImages, SquareTensorsMatchTorchTitan) {
  ASSERT_NE(manifest_, nullptr);
  const auto& cases = (*manifest_)["square"];
  ASSERT_GE(cases.size(), 12u);
  for (const auto& entry : cases) {
    const std::string file = entry["file"];
    const int size = entry["size"];
    SCOPED_TRACE(file + " at " + std::to_string(size));
    const Tensor tensor = load_image_tensor(path(file), size);
    ASSERT_EQ(tensor.shape(), (Shape{3, size, size}));
    const std::string expected = read_bytes(path(entry["expected"]));
    ASSERT_EQ(expected.size(), static_cast<size_t>(3 * size * size) * sizeof(float));
    std::vector<float> values(static_cast<size_t>(3 * size * size));
    std::memcpy(values.data(), expected.data(), expected.size());
    int64_t different = 0;
    for (size_t i = 0; i < values.size(); ++i) different += tensor.data<float>()[i] != values[i];
    EXPECT_EQ(different, 0);
  }
}

// Cut anywhere, a file is refused with an error naming it, never decoded as
// something (libjpeg alone would pad a cut JPEG with grey) and never a crash.
TEST_F(PilImages, RefusesTruncatedFiles) {
  ASSERT_NE(manifest_, nullptr);
  for (const std::string file : {"rgb.png", "interlaced.png", "palette.png", "ycc420.jpg", "progressive.jpg"}) {
    const std::string bytes = read_bytes(path(file));
    int refused = 0, tried = 0;
    for (size_t length = 0; length < bytes.size(); length += 1 + length / 16) {
      ++tried;
      try {
        decode_image(std::string_view(bytes).substr(0, length), file);
      } catch (const Error& error) {
        ++refused;
        EXPECT_NE(std::string(error.what()).find(file), std::string::npos) << error.what();
      }
    }
    EXPECT_EQ(refused, tried) << file;
  }
}

TEST_F(PilImages, RefusesCorruptFiles) {
  ASSERT_NE(manifest_, nullptr);
  std::string png = read_bytes(path("rgb.png"));
  png[50] = static_cast<char>(png[50] ^ 0x55);  // inside IDAT's data: its CRC no longer holds
  expect_error([&] { decode_image(png, "bad.png"); }, {"bad.png", "corrupt or truncated PNG"});
  std::string jpeg = read_bytes(path("ycc420.jpg"));
  // The frame header's sample precision (SOF0: FF C0, length, precision) to 7 bits.
  const size_t frame = jpeg.find("\xFF\xC0");
  ASSERT_NE(frame, std::string::npos);
  jpeg[frame + 4] = 7;
  expect_error([&] { decode_image(jpeg, "bad.jpg"); }, {"bad.jpg", "corrupt or truncated JPEG"});
  expect_error([&] { decode_image("GIF89a......", "anim.gif"); }, {"anim.gif", "not a PNG or JPEG"});
  expect_error([&] { decode_image("", "empty.png"); }, {"empty.png", "not a PNG or JPEG"});
  expect_error([&] { read_image(path("missing.png")); }, {"missing.png"});
}

// A header that claims a huge image is refused before any allocation.
TEST(ImageFile, RefusesOversizedHeaders) {
  TempDir dir;
  RgbImage small;
  small.width = small.height = 2;
  small.pixels.assign(12, 7);
  std::string png = encode_png(small, "small.png");
  // IHDR's width and height (bytes 16..23) to 60000 x 60000, and its CRC (bytes 29..32) to match.
  const unsigned char big[8] = {0, 0, 0xEA, 0x60, 0, 0, 0xEA, 0x60};
  std::memcpy(png.data() + 16, big, 8);
  uint32_t crc = 0xFFFFFFFFu;  // CRC-32 of "IHDR" + its 13 data bytes
  for (size_t i = 12; i < 29; ++i) {
    crc ^= static_cast<unsigned char>(png[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  crc ^= 0xFFFFFFFFu;
  for (int k = 0; k < 4; ++k) png[29 + k] = static_cast<char>(crc >> (24 - 8 * k));
  expect_error([&] { decode_image(png, "huge.png"); }, {"huge.png", "60000x60000", "more than"});
}

TEST(ImageFile, PngRoundTrip) {
  TempDir dir;
  RgbImage image;
  image.width = 5;
  image.height = 3;
  for (int i = 0; i < 45; ++i) image.pixels.push_back(static_cast<uint8_t>(i * 5));
  write_png(dir / "a.png", image);
  const RgbImage back = read_image(dir / "a.png");
  EXPECT_EQ(back.width, 5);
  EXPECT_EQ(back.height, 3);
  EXPECT_EQ(back.pixels, image.pixels);
  RgbImage wrong = image;
  wrong.pixels.pop_back();
  expect_error([&] { encode_png(wrong, "wrong.png"); }, {"wrong.png", "44 bytes", "5x3"});
}

// Every level to [-1, 1] and back; TorchTitan's formula at the ends and the middle.
TEST(ImageTensor, LevelsRoundTripAndClamp) {
  RgbImage image;
  image.width = 256;
  image.height = 1;
  for (int v = 0; v < 256; ++v) image.pixels.insert(image.pixels.end(), {uint8_t(v), uint8_t(255 - v), uint8_t(v)});
  const Tensor tensor = image_to_tensor(image);
  ASSERT_EQ(tensor.shape(), (Shape{3, 1, 256}));
  EXPECT_EQ(tensor.data<float>()[0], -1.0f);
  EXPECT_EQ(tensor.data<float>()[255], 1.0f);
  EXPECT_EQ(tensor.data<float>()[256], 1.0f);  // channel 1 starts at 255
  EXPECT_NEAR(tensor.data<float>()[128], 128.0 / 255.0 * 2.0 - 1.0, 1e-7);
  EXPECT_EQ(tensor_to_image(tensor, "t").pixels, image.pixels);

  Tensor over = Tensor::from_floats(std::vector<float>{-3.0f, 2.0f, 0.0f}, {3, 1, 1});
  EXPECT_EQ(tensor_to_image(over, "t").pixels, (std::vector<uint8_t>{0, 255, 128}));
  Tensor nan = Tensor::from_floats(std::vector<float>{0.0f, NAN, 0.0f}, {3, 1, 1});
  expect_error([&] { tensor_to_image(nan, "sample.png"); }, {"sample.png", "NaN", "channel 1"});
  expect_error([&] { tensor_to_image(Tensor::zeros({4, 2, 2}), "x.png"); }, {"x.png", "[3, H, W]"});
}

// TorchTitan's sizes: shorter side to S, longer ceil(S / short * long); the
// crop slides along the longer side only; offsets outside it are refused.
TEST(ImageTensor, SquareResizeSizesAndCrop) {
  const SquareResize landscape = square_resize_size(300, 200, 64);
  EXPECT_EQ(landscape.width, 96);
  EXPECT_EQ(landscape.height, 64);
  const SquareResize odd = square_resize_size(77, 131, 32);
  EXPECT_EQ(odd.width, 32);
  EXPECT_EQ(odd.height, static_cast<int>(std::ceil(32.0 / 77 * 131)));
  EXPECT_EQ(odd.height, 55);
  // An image whose pixels say where they are: the crop at offset k starts at column k.
  RgbImage wide;
  wide.width = 48;
  wide.height = 32;
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 48; ++x) wide.pixels.insert(wide.pixels.end(), {uint8_t(x), uint8_t(y), 0});
  const RgbImage left = resize_to_square(wide, 32, 0);
  const RgbImage centre = resize_to_square(wide, 32);
  EXPECT_EQ(left.at(0, 5, 0), 0);
  EXPECT_EQ(centre.at(0, 5, 0), 8);
  EXPECT_EQ(centre.at(31, 31, 1), 31);
  expect_error([&] { resize_to_square(wide, 32, 17); }, {"offset 17", "0..16"});
}

}  // namespace image_file_test
}  // namespace titan::data
