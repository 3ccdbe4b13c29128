// The synthetic coloured-shapes dataset: small images of one square, circle or
// triangle of one of six colours at one of five positions on black, with
// captions ("a red square at the top left"), generated deterministically so
// that tests and the FLUX example learn from it without downloads, and a
// held-out split of colour x position pairs that training never shows.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/image_captions.h"
#include "titan/data/image_file.h"

namespace titan::data {

struct ShapeColour {
  std::string_view name;
  uint8_t rgb[3];
};

// Fully saturated primaries and secondaries on a black background: each is
// 255 away from black in some channel and from every other colour, so a
// pixel's colour is unambiguous (shapes_measure.h).
std::span<const ShapeColour> shape_colours();         // red, green, blue, yellow, cyan, magenta
std::span<const std::string_view> shape_kinds();      // square, circle, triangle
std::span<const std::string_view> shape_positions();  // top left, top right, bottom left, bottom right, centre
inline constexpr uint8_t kShapesBackground[3] = {0, 0, 0};
// Each position's centre as a fraction of the side: the quarter points and the middle.
struct ShapePositionCentre {
  double x;
  double y;
};
std::span<const ShapePositionCentre> shape_position_centres();

// Indices into the three lists above.
struct ShapeLabel {
  int shape = 0;
  int colour = 0;
  int position = 0;
  bool operator==(const ShapeLabel&) const = default;
};

// "a red square at the top left", "a blue circle in the centre".
std::string shape_caption(const ShapeLabel& label);
// The label of a caption shape_caption writes; nullopt for any other text.
std::optional<ShapeLabel> parse_shape_caption(std::string_view caption);

// Held out of training: each colour at one position (colour c at position
// c mod 5: red top left, green top right, blue bottom left, yellow bottom
// right, cyan centre, magenta top left), every shape. Training still shows
// every colour at four positions and every position in at least four colours,
// so a held-out caption is a new combination of things seen, the test of
// composition. 18 of the 90 captions.
bool is_heldout(int colour, int position);
enum class ShapesSplit { train, heldout };
// The labels a split draws from, in a fixed order (72 train, 18 held out).
std::vector<ShapeLabel> shape_labels(ShapesSplit split);

struct ShapesOptions {
  int image_size = 32;  // the square side, 16..1024
  int64_t count = 1000;
  uint64_t seed = 0;
  ShapesSplit split = ShapesSplit::train;
};

struct ShapeSample {
  ShapeLabel label;
  std::string caption;
  RgbImage image;
};

// Sample `index` of a split: a label drawn uniformly from the split's labels,
// the shape's centre jittered by up to size/16 around its position (the
// quarter points, or the middle) and its half-extent drawn from 0.12..0.18 of
// the size. Drawn without anti-aliasing, so every pixel is the background or
// the colour exactly. It depends only on (seed, split, index, size) through
// the Philox generator: any sample can be made on its own, on any machine.
ShapeSample make_shape_sample(const ShapesOptions& options, int64_t index);

// Samples 0..count-1.
std::vector<ShapeSample> generate_shapes(const ShapesOptions& options);

// Writes samples 0..count-1 into `folder` (created if missing) as
// 00000.png, 00001.png, ... (at least five digits) and captions.jsonl (one
// {"image": "00000.png", "caption": "..."} per line, image_captions.h), the
// layout `titan data prepare --images DIR --captions FILE` reads. Returns the
// captions file's path.
std::filesystem::path write_shapes_dataset(const std::filesystem::path& folder, const ShapesOptions& options);

}  // namespace titan::data
