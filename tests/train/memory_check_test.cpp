// The memory check's margin and report: a job is admitted only while its
// estimate leaves 10% of the available memory free (llama3 1B was admitted at
// 97% and then ran for minutes, swapping), and its summary says how close it is.
#include "titan/train/memory_check.h"

#include <gtest/gtest.h>

namespace titan::train {
namespace memory_check_test {

TEST(MemoryCheck, AJobMustLeaveAMarginAndSaysHowCloseItIs) {
  MemoryBudget budget;
  budget.available_bytes = 100.0 * (1 << 30);
  budget.source = "MemAvailable in /proc/meminfo";
  budget.needed_bytes = 97.0 * (1 << 30);
  EXPECT_FALSE(budget.fits());
  budget.needed_bytes = 90.5 * (1 << 30);
  EXPECT_FALSE(budget.fits());
  budget.needed_bytes = 89.5 * (1 << 30);
  EXPECT_TRUE(budget.fits());
  EXPECT_EQ(budget.summary(),
            "needs about 89.5 GiB per rank of 100 GiB available (90%; MemAvailable in /proc/meminfo)");
  // Unknown capacity: nothing to refuse against.
  budget.available_bytes = 0;
  EXPECT_TRUE(budget.fits());
}

}  // namespace memory_check_test
}  // namespace titan::train
