// Images as the float tensors the FLUX data pipeline feeds the autoencoder:
// TorchTitan's square resize-and-crop to img_size, [3, S, S] in [-1, 1], and
// back to a PNG (validation images, the shapes dataset's checks).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "titan/core/tensor.h"
#include "titan/data/image_file.h"

namespace titan::data {

// The size TorchTitan's _process_cc12m_image resizes to before cropping: the
// shorter side becomes `size`, the longer ceil(size / shorter * longer)
// (that expression's double arithmetic, so the sizes agree with Python's).
struct SquareResize {
  int width = 0;
  int height = 0;
  // How far the size x size crop may slide along the longer side: 0..slack.
  int slack() const { return width > height ? width - height : height - width; }
};
SquareResize square_resize_size(int width, int height, int size);

// Resizes as above (PIL's bicubic, resize_bicubic) and crops size x size at
// `crop_offset` along the longer side, or at its centre (slack / 2, rounded
// down) when none is given. TorchTitan draws the offset uniformly from
// 0..slack for training; the centre makes preparation deterministic. It also
// skips images with a side under `size`: this function enlarges them, so a
// caller that wants TorchTitan's rule checks is_smaller_than first.
// TorchTitan resizes in the file's own PIL mode and converts to RGB after,
// which differs from this (decode to RGB, then resize) in three cases, all
// rare in photograph datasets: palette images (PIL resizes mode P with
// nearest-neighbour), partly transparent RGBA/LA (PIL resizes them
// premultiplied) and 16-bit grey (PIL clips values at 255 where titan takes
// the high byte). RGB, grey and JPEG files agree bit for bit (tested).
RgbImage resize_to_square(const RgbImage& image, int size, std::optional<int> crop_offset = std::nullopt);
inline bool is_smaller_than(const RgbImage& image, int size) { return image.width < size || image.height < size; }

// [3, H, W] float32, v / 255 * 2 - 1 in float32 as TorchTitan computes it
// (torch's float division, so the values match it bit for bit).
Tensor image_to_tensor(const RgbImage& image);

// The inverse for a [3, H, W] float32 CPU tensor: round((x + 1) / 2 * 255),
// values outside [-1, 1] clamped (a model's output may overshoot). A NaN or a
// wrong shape is an error naming `what`.
RgbImage tensor_to_image(const Tensor& tensor, const std::string& what);

// The image file at `path` as a [3, size, size] tensor in [-1, 1] (centre crop).
Tensor load_image_tensor(const std::filesystem::path& path, int size);

// A [3, H, W] float32 tensor in [-1, 1] written as an 8-bit RGB PNG.
void write_png_tensor(const std::filesystem::path& path, const Tensor& image);

}  // namespace titan::data
