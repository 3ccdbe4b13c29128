// The threads titan runs beside training, in one process (no launcher), so
// the ThreadSanitizer build (make tsan-test) sees them: the async checkpoint
// writer and the signal thread. (The data loader's prefetch thread runs in the
// data tests, the process groups' workers and the stall census in the
// distributed ones, which that build runs too.)
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <thread>

#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/comm/device_mesh.h"
#include "titan/comm/local_process_group.h"
#include "titan/core/copy.h"
#include "titan/train/checkpointer.h"
#include "titan/train/preemption.h"

namespace titan {
namespace {

namespace fs = std::filesystem;

TEST(AsyncCheckpoint, TheWriterThreadSavesTheStepWhileTrainingChangesTheTensors) {
  train::JobConfig config;
  config.job.dump_folder = ::testing::TempDir() + "/async_checkpoint";
  fs::remove_all(config.job.dump_folder);
  const comm::DeviceMesh mesh({}, std::make_shared<comm::LocalProcessGroup>());
  train::Checkpointer checkpointer(config, mesh);
  const std::vector<float> values{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  Tensor weight = Tensor::from_floats(values, {2, 3});
  const std::vector<train::StateTensor> state{{"model.w", "model", weight, {2, 3}, {0, 0}, true}};
  checkpointer.save(1, state, {{"contents", {"model"}}}, nlohmann::json::object(), /*async=*/true);
  // The next steps change the live tensor while the writer thread writes its copy.
  for (int step = 0; step < 50; ++step) {
    titan::fill_(weight, static_cast<double>(step));
    checkpointer.end_of_step(false);
  }
  checkpointer.wait();
  const fs::path folder = fs::path(checkpointer.root()) / checkpoint::step_folder_name(1);
  ASSERT_TRUE(checkpoint::is_complete_checkpoint(folder.string()));
  Tensor loaded = Tensor::zeros({2, 3});
  train::Checkpointer::load(folder.string(), {{"model.w", "model", loaded, {2, 3}, {0, 0}, true}}, {"model"});
  EXPECT_EQ(loaded.to_floats(), values);
}

TEST(SignalThread, ASigtermDuringAJobIsAStopRequest) {
  train::PreemptionWatcher watcher;
  EXPECT_FALSE(watcher.requested(1, 0));
  // Delivered to the process: the signal thread (every other thread blocks it) takes it.
  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
  for (int i = 0; i < 5000 && !watcher.requested(2, 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(watcher.requested(3, 0));
  EXPECT_EQ(train::PreemptionWatcher::signal_received(), SIGTERM);
}

}  // namespace
}  // namespace titan

// The signal thread must exist before any other thread, so that every thread
// inherits the blocked signals (as titan's main does).
int main(int argc, char** argv) {
  titan::train::install_signal_thread();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
