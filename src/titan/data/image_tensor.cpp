// Square crops and float tensors for the image datasets (see image_tensor.h).
#include "titan/data/image_tensor.h"

#include <algorithm>
#include <cmath>

#include "titan/core/error.h"
#include "titan/data/image_resize.h"

namespace titan::data {

SquareResize square_resize_size(int width, int height, int size) {
  TITAN_CHECK(width > 0 && height > 0 && size > 0, "square resize: image {}x{} to side {} (all must be positive)",
              width, height, size);
  // TorchTitan: math.ceil(output_size / height * width) for a landscape image.
  if (width >= height) {
    return {static_cast<int>(std::ceil(static_cast<double>(size) / height * width)), size};
  }
  return {size, static_cast<int>(std::ceil(static_cast<double>(size) / width * height))};
}

RgbImage resize_to_square(const RgbImage& image, int size, std::optional<int> crop_offset) {
  const SquareResize target = square_resize_size(image.width, image.height, size);
  const int offset = crop_offset.value_or(target.slack() / 2);
  TITAN_CHECK(offset >= 0 && offset <= target.slack(),
              "square crop: offset {} is outside 0..{} (image {}x{} resized to {}x{} for side {})", offset,
              target.slack(), image.width, image.height, target.width, target.height, size);
  const RgbImage resized = resize_bicubic(image, target.width, target.height);
  const int left = target.width > size ? offset : 0;
  const int top = target.height > size ? offset : 0;
  RgbImage square;
  square.width = square.height = size;
  square.pixels.resize(static_cast<size_t>(size) * size * 3);
  for (int y = 0; y < size; ++y) {
    const uint8_t* row = &resized.pixels[(static_cast<size_t>(y + top) * resized.width + left) * 3];
    std::copy(row, row + static_cast<size_t>(size) * 3, &square.pixels[static_cast<size_t>(y) * size * 3]);
  }
  return square;
}

Tensor image_to_tensor(const RgbImage& image) {
  const int64_t plane = static_cast<int64_t>(image.width) * image.height;
  Tensor tensor = Tensor::empty({3, image.height, image.width}, DType::f32);
  float* out = tensor.data<float>();
  for (int64_t i = 0; i < plane; ++i) {
    for (int c = 0; c < 3; ++c) {
      out[c * plane + i] = static_cast<float>(image.pixels[i * 3 + c]) / 255.0f * 2.0f - 1.0f;
    }
  }
  return tensor;
}

RgbImage tensor_to_image(const Tensor& tensor, const std::string& what) {
  TITAN_CHECK(tensor.dim() == 3 && tensor.shape()[0] == 3 && tensor.shape()[1] > 0 && tensor.shape()[2] > 0,
              "{}: an image tensor must be [3, H, W], not {}", what, shape_str(tensor.shape()));
  TITAN_CHECK(tensor.dtype() == DType::f32 && tensor.device().is_cpu(),
              "{}: an image tensor must be float32 on the CPU, not {} on {}", what, dtype_name(tensor.dtype()),
              tensor.device().str());
  const Tensor contiguous = tensor.contiguous();
  const float* in = contiguous.data<float>();
  RgbImage image;
  image.height = static_cast<int>(tensor.shape()[1]);
  image.width = static_cast<int>(tensor.shape()[2]);
  const int64_t plane = static_cast<int64_t>(image.width) * image.height;
  image.pixels.resize(static_cast<size_t>(plane) * 3);
  for (int c = 0; c < 3; ++c) {
    for (int64_t i = 0; i < plane; ++i) {
      const float x = in[c * plane + i];
      TITAN_CHECK(!std::isnan(x), "{}: the image tensor holds NaN at channel {}, pixel ({}, {})", what, c,
                  i % image.width, i / image.width);
      const float level = std::round((std::clamp(x, -1.0f, 1.0f) + 1.0f) * 0.5f * 255.0f);
      image.pixels[i * 3 + c] = static_cast<uint8_t>(level);
    }
  }
  return image;
}

Tensor load_image_tensor(const std::filesystem::path& path, int size) {
  return image_to_tensor(resize_to_square(read_image(path), size));
}

void write_png_tensor(const std::filesystem::path& path, const Tensor& image) {
  write_png(path, tensor_to_image(image, path.string()));
}

}  // namespace titan::data
