// Whole-file reads and atomic writes for the data layer, with errors that
// name the file and say what it was for.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace titan::data {

// The file's bytes; a titan::Error naming `path` and `what` ("tokenizer",
// "corpus", ...) if it is missing, a directory or unreadable.
std::string read_file(const std::filesystem::path& path, std::string_view what);

// Writes `bytes` to a temporary file next to `path`, then renames it over
// `path`, so a crash never leaves a half-written file under the final name.
// The folder must exist: a write into a staging folder that a signal's
// cleanup removed fails rather than bringing the folder back.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

}  // namespace titan::data
