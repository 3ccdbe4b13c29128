// The synthetic coloured-shapes dataset (see shapes_dataset.h).
#include "titan/data/shapes_dataset.h"

#include <array>
#include <cmath>

#include "titan/core/error.h"
#include "titan/core/philox.h"

namespace titan::data {
namespace {

constexpr std::array<ShapeColour, 6> kShapeColours = {{
    {"red", {255, 0, 0}},
    {"green", {0, 255, 0}},
    {"blue", {0, 0, 255}},
    {"yellow", {255, 255, 0}},
    {"cyan", {0, 255, 255}},
    {"magenta", {255, 0, 255}},
}};
constexpr std::array<std::string_view, 3> kShapeKinds = {"square", "circle", "triangle"};
constexpr std::array<std::string_view, 5> kShapePositions = {"top left", "top right", "bottom left", "bottom right",
                                                             "centre"};
constexpr std::array<ShapePositionCentre, 5> kShapePositionCentres = {
    {{0.25, 0.25}, {0.75, 0.25}, {0.25, 0.75}, {0.75, 0.75}, {0.5, 0.5}}};

// Whether the pixel centred at (px, py) is inside the shape centred at (cx, cy)
// with half-extent r: a square, a disc, or an upright isosceles triangle whose
// apex is r above the centre and whose base is r below it, 2r wide.
bool shape_covers(int shape, double px, double py, double cx, double cy, double r) {
  const double dx = px - cx, dy = py - cy;
  switch (shape) {
    case 0:
      return std::fabs(dx) <= r && std::fabs(dy) <= r;
    case 1:
      return dx * dx + dy * dy <= r * r;
    default:
      return dy >= -r && dy <= r && std::fabs(dx) <= (dy + r) / 2;
  }
}

}  // namespace

std::span<const ShapeColour> shape_colours() { return kShapeColours; }
std::span<const std::string_view> shape_kinds() { return kShapeKinds; }
std::span<const std::string_view> shape_positions() { return kShapePositions; }
std::span<const ShapePositionCentre> shape_position_centres() { return kShapePositionCentres; }

std::string shape_caption(const ShapeLabel& label) {
  TITAN_CHECK(label.shape >= 0 && label.shape < static_cast<int>(kShapeKinds.size()) && label.colour >= 0 &&
                  label.colour < static_cast<int>(kShapeColours.size()) && label.position >= 0 &&
                  label.position < static_cast<int>(kShapePositions.size()),
              "shape caption: no shape {}, colour {}, position {}", label.shape, label.colour, label.position);
  const std::string_view where = label.position == 4 ? "in the" : "at the";
  return fmt::format("a {} {} {} {}", kShapeColours[label.colour].name, kShapeKinds[label.shape], where,
                     kShapePositions[label.position]);
}

std::optional<ShapeLabel> parse_shape_caption(std::string_view caption) {
  for (const ShapesSplit split : {ShapesSplit::train, ShapesSplit::heldout}) {
    for (const ShapeLabel& label : shape_labels(split)) {
      if (shape_caption(label) == caption) return label;
    }
  }
  return std::nullopt;
}

bool is_heldout(int colour, int position) { return position == colour % static_cast<int>(kShapePositions.size()); }

std::vector<ShapeLabel> shape_labels(ShapesSplit split) {
  std::vector<ShapeLabel> labels;
  for (int shape = 0; shape < static_cast<int>(kShapeKinds.size()); ++shape) {
    for (int colour = 0; colour < static_cast<int>(kShapeColours.size()); ++colour) {
      for (int position = 0; position < static_cast<int>(kShapePositions.size()); ++position) {
        if (is_heldout(colour, position) == (split == ShapesSplit::heldout))
          labels.push_back({shape, colour, position});
      }
    }
  }
  return labels;
}

ShapeSample make_shape_sample(const ShapesOptions& options, int64_t index) {
  const int size = options.image_size;
  TITAN_CHECK(size >= 16 && size <= 1024, "shapes dataset: image_size {} is outside 16..1024", size);
  TITAN_CHECK(index >= 0, "shapes dataset: sample index {} is negative", index);
  const std::vector<ShapeLabel> labels = shape_labels(options.split);
  // One Philox block per sample; the stream separates the splits, so the
  // held-out samples are not the training ones relabelled.
  const uint64_t stream = options.split == ShapesSplit::train ? 0 : 1;
  const Philox4x32 bits = philox4x32_10(static_cast<uint64_t>(index), stream, options.seed);
  const auto pick = static_cast<size_t>(philox_uniform(bits.x[0]) * static_cast<double>(labels.size()));
  ShapeSample sample;
  sample.label = labels[pick];
  sample.caption = shape_caption(sample.label);
  const double jitter = size / 16.0;
  const double cx =
      kShapePositionCentres[sample.label.position].x * size + (philox_uniform(bits.x[1]) * 2 - 1) * jitter;
  const double cy =
      kShapePositionCentres[sample.label.position].y * size + (philox_uniform(bits.x[2]) * 2 - 1) * jitter;
  const double r = size * (0.12 + 0.06 * philox_uniform(bits.x[3]));

  RgbImage& image = sample.image;
  image.width = image.height = size;
  image.pixels.resize(static_cast<size_t>(size) * size * 3);
  const uint8_t* colour = kShapeColours[sample.label.colour].rgb;
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      const bool inside = shape_covers(sample.label.shape, x + 0.5, y + 0.5, cx, cy, r);
      for (int c = 0; c < 3; ++c) image.at(x, y, c) = inside ? colour[c] : kShapesBackground[c];
    }
  }
  return sample;
}

std::vector<ShapeSample> generate_shapes(const ShapesOptions& options) {
  TITAN_CHECK(options.count >= 0, "shapes dataset: count {} is negative", options.count);
  std::vector<ShapeSample> samples;
  samples.reserve(static_cast<size_t>(options.count));
  for (int64_t i = 0; i < options.count; ++i) samples.push_back(make_shape_sample(options, i));
  return samples;
}

std::filesystem::path write_shapes_dataset(const std::filesystem::path& folder, const ShapesOptions& options) {
  TITAN_CHECK(options.count > 0, "shapes dataset: count {} must be positive", options.count);
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  TITAN_CHECK(!error, "shapes dataset: cannot create the folder {}: {}", folder.string(), error.message());
  const int digits = std::max<int>(5, static_cast<int>(std::to_string(options.count - 1).size()));
  std::vector<CaptionLine> lines;
  lines.reserve(static_cast<size_t>(options.count));
  for (int64_t i = 0; i < options.count; ++i) {
    ShapeSample sample = make_shape_sample(options, i);
    std::string name = fmt::format("{:0{}}.png", i, digits);
    write_png(folder / name, sample.image);
    lines.push_back({std::move(name), std::move(sample.caption)});
  }
  std::filesystem::path captions = folder / "captions.jsonl";
  write_image_captions(captions, lines);
  return captions;
}

}  // namespace titan::data
