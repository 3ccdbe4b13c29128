// Runs the distributed tests on every rank of an mpirun job. The world is
// initialised before any test (every rank must join it); rank 0 prints
// GoogleTest's usual report, every rank prints its own failures tagged with
// its rank, and all ranks exit with the same status.
#include <gtest/gtest.h>

#include <cstdio>

#include "titan/comm/world.h"

namespace {

// Collectives time out well inside CTest's limit, so a test that leaves a
// peer waiting ends the job with a message instead of hanging it. Under the
// sanitizers the limit is longer: with four ranks on two cores, the ranks
// already waiting in Open MPI's collectives poll (yielding) while the last
// one still computes, and an instrumented rank then gets so little of a core
// that checking four received 64 Ki-element messages took 16 s under
// ThreadSanitizer (CI timed out at 30 s once).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr double kCollectiveTimeoutSeconds = 180.0;
#else
constexpr double kCollectiveTimeoutSeconds = 30.0;
#endif

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
    std::fflush(stderr);
  }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
      std::fflush(stderr);
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto& world = titan::comm::World::instance(kCollectiveTimeoutSeconds);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world.rank() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankFailurePrinter(world.rank()));
  const int result = RUN_ALL_TESTS();

  // Every rank reports the same verdict, and rank 0 names the ranks that failed.
  const auto failed = titan::Tensor::zeros({world.size()}, titan::DType::i32);
  const auto mine = titan::Tensor::from_vector(std::vector<int32_t>{result != 0 ? 1 : 0}, {1});
  world.group()->all_gather(failed, mine)->wait();
  std::vector<int> failed_ranks;
  for (int r = 0; r < world.size(); ++r) {
    if (failed.data<int32_t>()[r] != 0) failed_ranks.push_back(r);
  }
  if (world.rank() == 0) {
    std::printf("distributed tests: %d ranks ran; %s\n", world.size(),
                failed_ranks.empty() ? "all passed" : fmt::format("failures on ranks {}", failed_ranks).c_str());
  }
  // This rank's own result too, in case the gather itself is what broke.
  return result == 0 && failed_ranks.empty() ? 0 : 1;
}
