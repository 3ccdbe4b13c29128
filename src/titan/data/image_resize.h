// Resampling 8-bit RGB images as PIL's Image.resize does with its default
// filter (bicubic, a = -0.5), the resize TorchTitan's FLUX data applies, so
// titan's training images are PIL's bit for bit.
#pragma once

#include "titan/data/image_file.h"

namespace titan::data {

// PIL's convolution resampling with the bicubic filter: separable, horizontal
// pass first, each pass rounded to 8 bits; when shrinking, the filter is
// stretched by the scale factor (antialiasing). Coefficients are quantised to
// 22 fractional bits as PIL does for 8-bit images. A pass whose size does not
// change is skipped (PIL skips it too; the bicubic kernel is the identity there).
RgbImage resize_bicubic(const RgbImage& image, int width, int height);

}  // namespace titan::data
