// The synthetic shapes dataset: determinism, the held-out split, the files it
// writes and their captions reader, and the measurement the FLUX learning
// test scores generated images with (right on every generated image, at
// chance on noise).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "peer_support.h"
#include "support/expect_error.h"
#include "titan/core/philox.h"
#include "titan/data/image_captions.h"
#include "titan/data/shapes_dataset.h"
#include "titan/data/shapes_measure.h"

namespace titan::data {
namespace shapes_dataset_test {

using testing::TempDir;
using testing::write_bytes;
using titan::testing::expect_error;

TEST(ShapesDataset, CaptionsAndSplits) {
  const auto train = shape_labels(ShapesSplit::train);
  const auto heldout = shape_labels(ShapesSplit::heldout);
  EXPECT_EQ(train.size(), 72u);
  EXPECT_EQ(heldout.size(), 18u);
  std::set<std::string> captions;
  for (const auto& labels : {train, heldout}) {
    for (const ShapeLabel& label : labels) {
      const std::string caption = shape_caption(label);
      EXPECT_TRUE(captions.insert(caption).second) << caption;
      EXPECT_EQ(parse_shape_caption(caption), label) << caption;
    }
  }
  EXPECT_EQ(shape_caption({0, 0, 0}), "a red square at the top left");
  EXPECT_EQ(shape_caption({1, 2, 4}), "a blue circle in the centre");
  EXPECT_EQ(shape_caption({2, 5, 3}), "a magenta triangle at the bottom right");
  EXPECT_FALSE(parse_shape_caption("a red square at the top").has_value());
  // Composition: training shows every colour at 4 positions and every
  // position in at least 4 colours; no held-out colour-position pair.
  std::map<int, std::set<int>> positions_of_colour, colours_at_position;
  for (const ShapeLabel& label : train) {
    EXPECT_FALSE(is_heldout(label.colour, label.position));
    positions_of_colour[label.colour].insert(label.position);
    colours_at_position[label.position].insert(label.colour);
  }
  for (int colour = 0; colour < 6; ++colour) EXPECT_EQ(positions_of_colour[colour].size(), 4u);
  for (int position = 0; position < 5; ++position) EXPECT_GE(colours_at_position[position].size(), 4u);
  for (const ShapeLabel& label : heldout) EXPECT_TRUE(is_heldout(label.colour, label.position));
}

TEST(ShapesDataset, Deterministic) {
  ShapesOptions options;
  options.count = 40;
  options.seed = 7;
  const auto a = generate_shapes(options);
  const auto b = generate_shapes(options);
  ASSERT_EQ(a.size(), 40u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].caption, b[i].caption);
    EXPECT_EQ(a[i].image.pixels, b[i].image.pixels);
    // A sample depends on its index, not on how many were asked for.
    EXPECT_EQ(make_shape_sample(options, static_cast<int64_t>(i)).image.pixels, a[i].image.pixels);
  }
  options.seed = 8;
  const auto c = generate_shapes(options);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].image.pixels == c[i].image.pixels;
  EXPECT_LT(same, 3);
}

// Labels are drawn uniformly: over 7,200 training samples each of the 72
// labels is expected 100 times (sd ~10); 55..145 is 4.5 sd either side.
TEST(ShapesDataset, LabelsUniform) {
  ShapesOptions options;
  options.image_size = 16;
  options.count = 7200;
  std::map<std::string, int> counts;
  for (const ShapeSample& sample : generate_shapes(options)) ++counts[sample.caption];
  EXPECT_EQ(counts.size(), 72u);
  for (const auto& [caption, count] : counts) {
    EXPECT_GT(count, 55) << caption;
    EXPECT_LT(count, 145) << caption;
  }
}

// The measurement reads every generated image as its own caption: colour,
// position and shape, at both sizes and in both splits.
TEST(ShapesMeasure, ReadsEveryGeneratedImageAsItsCaption) {
  for (const int size : {32, 64}) {
    for (const ShapesSplit split : {ShapesSplit::train, ShapesSplit::heldout}) {
      ShapesOptions options;
      options.image_size = size;
      options.count = 400;
      options.seed = 3;
      options.split = split;
      int right = 0;
      for (const ShapeSample& sample : generate_shapes(options)) {
        const ShapeMeasurement m = measure_shape_image(sample.image);
        const bool ok =
            m.colour == sample.label.colour && m.position == sample.label.position && m.shape == sample.label.shape;
        right += ok;
        EXPECT_TRUE(ok) << sample.caption << " measured as colour " << m.colour << ", position " << m.position
                        << ", shape " << m.shape;
        EXPECT_EQ(m.colour_purity, 1.0);
        EXPECT_GT(m.foreground_fraction, 0.01);
        EXPECT_LT(m.foreground_fraction, 0.15);
      }
      EXPECT_EQ(right, 400) << "size " << size;
    }
  }
}

// Uniform noise scored against the captions of generated samples: colour and
// position agree at chance (1/6 and 1/5). Over 1,200 images the standard
// deviation of a rate near 0.18 is ~0.011; 0.06 either side is over 5 sd,
// and a measurement that leaked the caption would be far outside.
TEST(ShapesMeasure, NoiseScoresAtChance) {
  ShapesOptions options;
  options.image_size = 32;
  options.count = 1200;
  options.seed = 11;
  const auto samples = generate_shapes(options);
  int colour_right = 0, position_right = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    RgbImage noise;
    noise.width = noise.height = 32;
    noise.pixels.resize(32 * 32 * 3);
    for (size_t p = 0; p < noise.pixels.size(); p += 4) {
      const Philox4x32 bits = philox4x32_10(p, i, 99);
      for (size_t k = 0; k < 4 && p + k < noise.pixels.size(); ++k) noise.pixels[p + k] = uint8_t(bits.x[k] >> 24);
    }
    const ShapeMeasurement m = measure_shape_image(noise);
    ASSERT_TRUE(m.found());
    EXPECT_GT(m.foreground_fraction, 0.8);
    colour_right += m.colour == samples[i].label.colour;
    position_right += m.position == samples[i].label.position;
  }
  const double colour_rate = colour_right / 1200.0, position_rate = position_right / 1200.0;
  EXPECT_NEAR(colour_rate, 1.0 / 6, 0.06);
  EXPECT_NEAR(position_rate, 1.0 / 5, 0.06);
}

TEST(ShapesMeasure, BlankImageHasNoShape) {
  RgbImage blank;
  blank.width = blank.height = 32;
  blank.pixels.assign(32 * 32 * 3, 20);
  const ShapeMeasurement m = measure_shape_image(blank);
  EXPECT_FALSE(m.found());
  EXPECT_EQ(m.foreground_fraction, 0.0);
}

// The folder layout: PNGs plus captions.jsonl, read back by the captions
// reader and the PNG decoder to exactly the generated samples.
TEST(ShapesDataset, WritesFolderTheReaderReads) {
  TempDir dir;
  ShapesOptions options;
  options.count = 12;
  options.seed = 5;
  options.split = ShapesSplit::heldout;
  const auto captions = write_shapes_dataset(dir / "shapes", options);
  EXPECT_EQ(captions, dir / "shapes" / "captions.jsonl");
  const auto entries = read_image_captions(captions);
  const auto samples = generate_shapes(options);
  ASSERT_EQ(entries.size(), 12u);
  EXPECT_EQ(entries[3].image, dir / "shapes" / "00003.png");
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i].caption, samples[i].caption);
    const RgbImage image = read_image(entries[i].image);
    EXPECT_EQ(image.pixels, samples[i].image.pixels);
    const ShapeMeasurement m = measure_shape_image(image);
    EXPECT_EQ(m.colour, samples[i].label.colour);
    EXPECT_EQ(m.position, samples[i].label.position);
  }
  expect_error([&] { write_shapes_dataset(dir / "x", {.image_size = 8}); }, {"image_size 8", "16..1024"});
}

TEST(ImageCaptions, RefusesBadLinesNamingFileAndLine) {
  TempDir dir;
  write_bytes(dir / "a.png", "not really a png");  // the reader checks existence, not content
  const auto check = [&](const std::string& content, const std::vector<std::string>& fragments) {
    write_bytes(dir / "captions.jsonl", content);
    expect_error([&] { read_image_captions(dir / "captions.jsonl"); }, fragments);
  };
  const std::string good = "{\"image\": \"a.png\", \"caption\": \"a cat\"}\n";
  check(good + "{\"image\": \"a.png\", \"caption\": \n", {"captions.jsonl:2", "not JSON"});
  check(good + "\n[1, 2]\n", {"captions.jsonl:3", "expected an object"});
  check("{\"caption\": \"x\"}\n", {"captions.jsonl:1", "\"image\" is missing"});
  check("{\"image\": \"a.png\", \"caption\": 3}\n", {"captions.jsonl:1", "\"caption\" must be a string"});
  check("{\"image\": \"/etc/passwd\", \"caption\": \"x\"}\n", {"captions.jsonl:1", "must be relative"});
  check("{\"image\": \"../a.png\", \"caption\": \"x\"}\n", {"captions.jsonl:1", "leaves the images folder"});
  check(good + "{\"image\": \"b.png\", \"caption\": \"x\"}\n", {"captions.jsonl:2", "b.png", "does not exist"});
  check("\n\n", {"captions.jsonl", "no captioned images"});
  expect_error([&] { read_image_captions(dir / "missing.jsonl"); }, {"missing.jsonl"});

  // Good lines: extra keys ignored, an empty caption kept, a separate images folder.
  write_bytes(dir / "captions.jsonl", good + "{\"image\": \"a.png\", \"caption\": \"\", \"id\": 7}\n");
  const auto entries = read_image_captions(dir / "captions.jsonl");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].caption, "a cat");
  EXPECT_EQ(entries[1].caption, "");
  std::filesystem::create_directories(dir / "sub");
  write_bytes(dir / "sub" / "a.png", "x");
  EXPECT_EQ(read_image_captions(dir / "captions.jsonl", dir / "sub")[0].image, dir / "sub" / "a.png");
}

}  // namespace shapes_dataset_test
}  // namespace titan::data
