// When a command's output overlaps its input: the same path after resolving
// "..", "." and links, a folder holding it, or one inside it; and never for
// neighbours that only share a prefix of their names.
#include "titan/core/path_overlap.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "support/expect_error.h"

namespace titan {
namespace path_overlap_test {

namespace fs = std::filesystem;

TEST(PathOverlap, SameHoldingInsideAndNeighbours) {
  const fs::path root = fs::path(::testing::TempDir()) / "path_overlap_test";
  fs::remove_all(root);
  fs::create_directories(root / "data" / "sub");
  fs::create_symlink(root / "data", root / "link");
  EXPECT_EQ(path_overlap(root / "data", root / "data"), PathOverlap::same);
  EXPECT_EQ(path_overlap(root / "data/", root / "data"), PathOverlap::same);
  EXPECT_EQ(path_overlap(root / "x" / ".." / "data", root / "data"), PathOverlap::same);
  EXPECT_EQ(path_overlap(root / "link", root / "data"), PathOverlap::same);
  EXPECT_EQ(path_overlap(root / "link" / "sub", root / "data" / "sub"), PathOverlap::same);
  EXPECT_EQ(path_overlap(root, root / "data" / "sub"), PathOverlap::output_holds_input);
  EXPECT_EQ(path_overlap(root / "link" / "new", root / "data"), PathOverlap::output_inside_input);
  EXPECT_EQ(path_overlap(root / "data_2", root / "data"), PathOverlap::none);
  EXPECT_EQ(path_overlap(root / "dat", root / "data"), PathOverlap::none);
  EXPECT_EQ(path_overlap(root / "sub", root / "data" / "sub"), PathOverlap::none);
  // Relative paths resolve against the working directory like absolute ones.
  EXPECT_EQ(path_overlap(fs::relative(root / "data"), root / "data" / "sub"), PathOverlap::output_holds_input);
}

TEST(PathOverlap, TheRefusalNamesBothRolesAndPaths) {
  const fs::path root = fs::path(::testing::TempDir()) / "path_overlap_refusal";
  fs::create_directories(root / "in");
  testing::expect_error([&] { check_output_apart_from_input(root / "in", "--output", root / "in", "--input"); },
                        {"--output", "is the --input", (root / "in").string(), "choose another --output"});
  testing::expect_error([&] { check_output_apart_from_input(root, "--to", root / "in", "source folder"); },
                        {"--to", "holds the source folder"});
  testing::expect_error([&] { check_output_apart_from_input(root / "in" / "x", "--output", root / "in", "--input"); },
                        {"lies inside the --input"});
  EXPECT_NO_THROW(check_output_apart_from_input(root / "out", "--output", root / "in", "--input"));
  EXPECT_NO_THROW(check_output_apart_from_input(root / "in", "--output", "", "--input"));
}

}  // namespace path_overlap_test
}  // namespace titan
