// Whether a command's output could destroy its own input: the same class of
// mistake (`--output` naming the input folder, a folder holding it, or a
// folder inside it) is refused by every command that writes, with paths
// compared after resolving "..", "." and symbolic links.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace titan {

// `path` with symbolic links and "." / ".." resolved as far as it exists, and
// without a trailing separator ("out/" is the folder "out").
std::filesystem::path resolved_path(const std::filesystem::path& path);

enum class PathOverlap { none, same, output_holds_input, output_inside_input };

PathOverlap path_overlap(const std::filesystem::path& output, const std::filesystem::path& input);

// A titan::Error naming both roles and paths when `output` (what the command
// creates, replaces or writes into) overlaps `input` (what it reads). Empty
// paths and built-in names that are not paths are never in conflict.
void check_output_apart_from_input(const std::filesystem::path& output, std::string_view output_role,
                                   const std::filesystem::path& input, std::string_view input_role);

}  // namespace titan
