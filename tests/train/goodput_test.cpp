// The step a resumed run's metrics.jsonl last logged (train/goodput.h): what the
// goodput's "lost to restart" counts from.
#include "titan/train/goodput.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace titan::train {
namespace goodput_test {

namespace fs = std::filesystem;

TEST(LastLoggedStep, IsTheLargestStepOfTheWholeRecords) {
  const fs::path path = fs::path(::testing::TempDir()) / "last_logged_step.jsonl";
  std::ofstream(path) << "{\"step\": 3, \"loss\": 1.5}\n"
                      << "{\"step\": 7}\n"
                      << "{\"goodput\": {\"percent\": 90}}\n"
                      << "{\"step\": 5}\n"
                      << "{\"step\": 9, \"lo";  // cut short by a crash: tells nothing
  EXPECT_EQ(last_logged_step(path.string()), 7);
  EXPECT_EQ(last_logged_step((fs::path(::testing::TempDir()) / "no_such_metrics.jsonl").string()), 0);
}

// /dev/zero (like /dev/full) reads as an endless line of NUL bytes: reading it as
// records never ended and grew without bound before only regular files were read.
TEST(LastLoggedStep, ADeviceInPlaceOfTheFileHoldsNoRecords) {
  EXPECT_EQ(last_logged_step("/dev/zero"), 0);
  EXPECT_EQ(last_logged_step("/dev/full"), 0);
  EXPECT_EQ(last_logged_step(::testing::TempDir()), 0);  // a folder
}

}  // namespace goodput_test
}  // namespace titan::train
