// The captions file of an image dataset: JSONL, one {"image": "0001.png",
// "caption": "a red square at the top left"} per line, image paths relative to
// the file's folder. `titan data prepare --images DIR --captions FILE` and the
// synthetic shapes dataset use it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace titan::data {

struct CaptionedImage {
  std::filesystem::path image;  // images_dir / the file's relative path
  std::string caption;
};

// Reads `captions_file`; each image path is resolved against `images_dir`
// (the captions file's folder when empty). Errors name the file and line: a
// line that is not a JSON object, a missing or non-string "image" or
// "caption", an absolute path or one that climbs out with "..", an image
// that does not exist, an empty file. Other keys are ignored; blank lines are
// skipped. An empty caption is allowed (the unconditional prompt).
std::vector<CaptionedImage> read_image_captions(const std::filesystem::path& captions_file,
                                                const std::filesystem::path& images_dir = {});

// One line per entry, in order, image paths written relative to the file's
// folder as given (`relative_image`); written atomically.
struct CaptionLine {
  std::string relative_image;
  std::string caption;
};
void write_image_captions(const std::filesystem::path& captions_file, const std::vector<CaptionLine>& lines);

}  // namespace titan::data
