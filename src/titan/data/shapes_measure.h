// Reading a shapes-dataset image back: which palette colour it shows, where,
// and which shape, so a test can score images a model generates for a caption
// (shapes_dataset.h) against that caption.
#pragma once

#include "titan/data/image_file.h"

namespace titan::data {

struct ShapeMeasurement {
  int colour = -1;    // index into shape_colours(); -1: nothing but background
  int position = -1;  // index into shape_positions()
  int shape = -1;     // index into shape_kinds()
  // Foreground pixels (any palette colour) over all pixels; a clean
  // generated image has 2-8%, noise about 87%.
  double foreground_fraction = 0.0;
  // The dominant colour's pixels over all foreground pixels (1 for a clean image).
  double colour_purity = 0.0;
  bool found() const { return colour >= 0; }
};

// A pixel is foreground when its brightest channel is at least 128 (the
// background is black; every palette colour has a channel at 255), and then
// it votes for its nearest palette colour (squared RGB distance). The
// dominant colour is the one with most votes (ties: the first in the
// palette); its pixels' centroid, as a fraction of the side, picks the
// nearest of the five position centres (the quarter points and the middle);
// the widths of their rows pick the shape (top and bottom rows as wide as
// the widest: square; only the bottom: triangle; neither: circle). Any image
// size.
ShapeMeasurement measure_shape_image(const RgbImage& image);

}  // namespace titan::data
