// The arithmetic follows PIL's libImaging/Resample.c (convolution resampling
// with fixed-point coefficients); matching it exactly is what lets the tests
// compare against PIL with no tolerance. Written from the algorithm, for one
// filter and one layout (interleaved RGB).
#include "titan/data/image_resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "titan/core/error.h"

namespace titan::data {
namespace {

// 8 bits of result, 2 bits of head-room for the negative lobes' overshoot.
constexpr int kResizePrecisionBits = 32 - 8 - 2;

double resize_bicubic_kernel(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// For each output index: the first input index, how many inputs, and their
// fixed-point weights (ksize of them, the unused ones zero).
struct ResizeTaps {
  int ksize = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int> weights;
};

ResizeTaps resize_taps(int in_size, int out_size) {
  constexpr double support_of_kernel = 2.0;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = support_of_kernel * filter_scale;
  ResizeTaps taps;
  taps.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  taps.weights.assign(static_cast<size_t>(out_size) * taps.ksize, 0);
  std::vector<double> k(taps.ksize);
  // A reciprocal multiplied, not a division: PIL's rounding, to the last bit.
  const double inverse_scale = 1.0 / filter_scale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    // Truncation toward zero of a value + 0.5, as PIL "rounds" it (not
    // lround: negative values must round as PIL's do, to pick PIL's taps).
    // NOLINTBEGIN(bugprone-incorrect-roundings)
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    // NOLINTEND(bugprone-incorrect-roundings)
    double total = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[x] = resize_bicubic_kernel((x + xmin - center + 0.5) * inverse_scale);
      total += k[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double w = total != 0.0 ? k[x] / total : k[x];
      const double scaled = w * (1 << kResizePrecisionBits);
      taps.weights[static_cast<size_t>(xx) * taps.ksize + x] = static_cast<int>(w < 0 ? scaled - 0.5 : scaled + 0.5);
    }
    taps.first[xx] = xmin;
    taps.count[xx] = xmax;
  }
  return taps;
}

inline uint8_t resize_clip8(int sum) { return static_cast<uint8_t>(std::clamp(sum >> kResizePrecisionBits, 0, 255)); }

// One pass along x (stride 3 bytes) or y (stride one row).
RgbImage resize_pass(const RgbImage& in, int out_width, int out_height, bool horizontal) {
  const ResizeTaps taps = resize_taps(horizontal ? in.width : in.height, horizontal ? out_width : out_height);
  RgbImage out;
  out.width = out_width;
  out.height = out_height;
  out.pixels.resize(static_cast<size_t>(out_width) * out_height * 3);
  const size_t step = horizontal ? 3 : static_cast<size_t>(in.width) * 3;
  for (int y = 0; y < out_height; ++y) {
    for (int x = 0; x < out_width; ++x) {
      const int o = horizontal ? x : y;
      const int* w = &taps.weights[static_cast<size_t>(o) * taps.ksize];
      const uint8_t* src = horizontal ? &in.pixels[(static_cast<size_t>(y) * in.width + taps.first[o]) * 3]
                                      : &in.pixels[(static_cast<size_t>(taps.first[o]) * in.width + x) * 3];
      for (int c = 0; c < 3; ++c) {
        int sum = 1 << (kResizePrecisionBits - 1);
        for (int t = 0; t < taps.count[o]; ++t) sum += src[t * step + c] * w[t];
        out.pixels[(static_cast<size_t>(y) * out_width + x) * 3 + c] = resize_clip8(sum);
      }
    }
  }
  return out;
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& image, int width, int height) {
  TITAN_CHECK(width > 0 && height > 0, "resize_bicubic: the size {}x{} must be positive", width, height);
  TITAN_CHECK(image.width > 0 && image.height > 0, "resize_bicubic: the image is empty ({}x{})", image.width,
              image.height);
  // PIL computes the vertical pass only over the rows it needs; every row is
  // needed when both passes run over whole images, so the results agree.
  RgbImage result = image.width != width ? resize_pass(image, width, image.height, true) : image;
  if (image.height != height) result = resize_pass(result, width, height, false);
  return result;
}

}  // namespace titan::data
