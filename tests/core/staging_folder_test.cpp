// A staging folder: written beside its target, published in one step over an
// old folder, removed when abandoned (destroyed unpublished, or the process
// ending on a signal: remove_abandoned_staging_folders), and a stale one an
// earlier killed run left is cleared when the next one starts.
#include "titan/core/staging_folder.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace titan {
namespace staging_folder_test {

namespace fs = std::filesystem;

std::string text(const fs::path& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(StagingFolder, PublishesOverTheOldFolderAndRemovesWhatIsAbandoned) {
  const fs::path root = fs::path(::testing::TempDir()) / "staging_folder_test";
  fs::remove_all(root);
  const fs::path target = root / "out";
  {
    StagingFolder staging(target.string() + "/");  // "out/" is the folder "out"
    EXPECT_EQ(staging.path(), fs::absolute(root / "out.partial"));
    std::ofstream(staging.path() / "file") << "first";
    EXPECT_FALSE(fs::exists(target));
    staging.publish();
  }
  EXPECT_EQ(text(target / "file"), "first");
  EXPECT_FALSE(fs::exists(root / "out.partial"));
  {
    StagingFolder staging(target);
    std::ofstream(staging.path() / "file") << "second";
    staging.publish();
  }
  EXPECT_EQ(text(target / "file"), "second");
  {
    StagingFolder abandoned(target);  // a failure: destroyed without publish
    std::ofstream(abandoned.path() / "file") << "never";
  }
  EXPECT_FALSE(fs::exists(root / "out.partial"));
  EXPECT_EQ(text(target / "file"), "second");
  // What a SIGKILL left behind goes when the next staging starts.
  fs::create_directories(root / "out.partial");
  std::ofstream(root / "out.partial" / "stale") << "stale";
  {
    StagingFolder next(target);
    EXPECT_FALSE(fs::exists(next.path() / "stale"));
    // The signal thread's cleanup removes every staging folder still unpublished.
    std::ofstream(next.path() / "file") << "cut short";
    remove_abandoned_staging_folders();
    EXPECT_FALSE(fs::exists(next.path()));
  }
  EXPECT_EQ(text(target / "file"), "second");
}

}  // namespace staging_folder_test
}  // namespace titan
