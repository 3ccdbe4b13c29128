// The image captions JSONL file (see image_captions.h).
#include "titan/data/image_captions.h"

#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/data/file_io.h"
#include "titan/data/jsonl_lines.h"

namespace titan::data {

std::vector<CaptionedImage> read_image_captions(const std::filesystem::path& captions_file,
                                                const std::filesystem::path& images_dir) {
  const std::string content = read_file(captions_file, "image captions");
  const std::filesystem::path base = images_dir.empty() ? captions_file.parent_path() : images_dir;
  std::vector<CaptionedImage> entries;
  for_each_jsonl_line(content, [&](std::string_view text, size_t line) {
    const auto where = fmt::format("{}:{}", captions_file.string(), line);
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& error) {
      fail("{}: not JSON ({})", where, error.what());
    }
    TITAN_CHECK(row.is_object(), "{}: expected an object {{\"image\": ..., \"caption\": ...}}, got {}", where,
                row.type_name());
    for (const char* key : {"image", "caption"}) {
      TITAN_CHECK(row.contains(key), "{}: the key \"{}\" is missing", where, key);
      TITAN_CHECK(row[key].is_string(), "{}: \"{}\" must be a string, not {}", where, key, row[key].type_name());
    }
    const std::filesystem::path relative = row["image"].get<std::string>();
    TITAN_CHECK(!relative.empty(), "{}: \"image\" is empty", where);
    TITAN_CHECK(relative.is_relative(), "{}: the image path \"{}\" must be relative to {}", where, relative.string(),
                base.string());
    for (const auto& part : relative) {
      TITAN_CHECK(part != "..", "{}: the image path \"{}\" leaves the images folder", where, relative.string());
    }
    std::filesystem::path image = base / relative;
    std::error_code error;
    TITAN_CHECK(std::filesystem::is_regular_file(image, error), "{}: the image {} does not exist", where,
                image.string());
    entries.push_back({std::move(image), row["caption"].get<std::string>()});
  });
  TITAN_CHECK(!entries.empty(), "{}: no captioned images (the file holds no JSON lines)", captions_file.string());
  return entries;
}

void write_image_captions(const std::filesystem::path& captions_file, const std::vector<CaptionLine>& lines) {
  std::string content;
  for (const auto& line : lines) {
    content += nlohmann::ordered_json{{"image", line.relative_image}, {"caption", line.caption}}.dump();
    content += '\n';
  }
  write_file_atomic(captions_file, content);
}

}  // namespace titan::data
