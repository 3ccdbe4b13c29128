#include "titan/core/path_overlap.h"

#include <algorithm>

#include "titan/core/error.h"

namespace titan {

namespace fs = std::filesystem;

fs::path resolved_path(const fs::path& path) {
  std::error_code error;
  fs::path resolved = fs::weakly_canonical(fs::absolute(path, error), error);
  if (error) resolved = fs::absolute(path).lexically_normal();
  return resolved.has_filename() || resolved == resolved.root_path() ? resolved : resolved.parent_path();
}

namespace {

// Whether `inner` is `outer` or lies under it, component by component ("a/bc" is not under "a/b").
bool within(const fs::path& inner, const fs::path& outer) {
  const auto [outer_end, inner_it] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return outer_end == outer.end();
}

}  // namespace

PathOverlap path_overlap(const fs::path& output, const fs::path& input) {
  const fs::path out = resolved_path(output), in = resolved_path(input);
  if (out == in) return PathOverlap::same;
  if (within(in, out)) return PathOverlap::output_holds_input;
  if (within(out, in)) return PathOverlap::output_inside_input;
  return PathOverlap::none;
}

void check_output_apart_from_input(const fs::path& output, std::string_view output_role, const fs::path& input,
                                   std::string_view input_role) {
  if (output.empty() || input.empty()) return;
  switch (path_overlap(output, input)) {
    case PathOverlap::none:
      return;
    case PathOverlap::same:
      fail("{} '{}' is the {} ('{}' resolves to {}): writing it would destroy what is being read; choose another {}",
           output_role, output.string(), input_role, input.string(), resolved_path(input).string(), output_role);
    case PathOverlap::output_holds_input:
      fail("{} '{}' holds the {} '{}' (resolved: {}): writing it would destroy what is being read; choose another {}",
           output_role, output.string(), input_role, input.string(), resolved_path(input).string(), output_role);
    case PathOverlap::output_inside_input:
      fail(
          "{} '{}' lies inside the {} '{}' (resolved: {}): it would be written into what is being read; choose a "
          "{} outside it",
          output_role, output.string(), input_role, input.string(), resolved_path(input).string(), output_role);
  }
}

}  // namespace titan
