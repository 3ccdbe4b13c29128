// send/recv around a ring of ranks, and barrier.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "distributed/mpi_test_support.h"

namespace titan::distributed {
namespace {

using testing::world;

// Large enough (256 KiB) that MPI cannot buffer it eagerly: each send waits
// for its matching receive. One worker runs a group's operations in issue
// order, so even ranks send first and odd ranks receive first, or every rank
// would sit in send.
TEST(PointToPoint, SendRecvRing) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  constexpr int64_t kCount = int64_t{1} << 16;
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  std::vector<float> payload(kCount);
  for (int64_t i = 0; i < kCount; ++i) payload[i] = static_cast<float>(me * 100000 + i);
  const Tensor outgoing = Tensor::from_floats(payload, {kCount});
  const Tensor incoming = Tensor::full({kCount}, -1.0);
  constexpr int kTag = 7;
  std::shared_ptr<Work> sent, received;
  if (me % 2 == 0) {
    sent = group.send(outgoing, right, kTag);
    received = group.recv(incoming, left, kTag);
  } else {
    received = group.recv(incoming, left, kTag);
    sent = group.send(outgoing, right, kTag);
  }
  sent->wait();
  received->wait();
  const auto got = incoming.to_floats();
  int64_t wrong = 0;
  for (int64_t i = 0; i < kCount; ++i) wrong += got[i] != static_cast<float>(left * 100000 + i);
  EXPECT_EQ(wrong, 0) << "of " << kCount << " elements from rank " << left;

  // Small i64 messages the other way round the ring.
  const Tensor ints_out = Tensor::from_vector(std::vector<int64_t>{me, int64_t{1} << 40}, {2});
  const Tensor ints_in = Tensor::zeros({2}, DType::i64);
  if (me % 2 == 0) {
    group.send(ints_out, left, kTag + 1);
    group.recv(ints_in, right, kTag + 1)->wait();
  } else {
    group.recv(ints_in, right, kTag + 1);
    group.send(ints_out, left, kTag + 1)->wait();
  }
  EXPECT_EQ(ints_in.to_ints(), (std::vector<int64_t>{right, int64_t{1} << 40}));
}

// No rank leaves the barrier before the last one entered it. Ranks enter in
// turn, 40 ms apart; the clocks are comparable because every rank runs on
// this machine (steady_clock is the system-wide monotonic clock on Linux).
TEST(PointToPoint, BarrierHoldsEveryRankUntilTheLastArrives) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  const auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(40 * me));
  const int64_t entered = now_ns();
  group.barrier();
  const int64_t left = now_ns();
  const Tensor times = Tensor::from_vector(std::vector<int64_t>{entered, left}, {2});
  const Tensor all = Tensor::zeros({n * 2}, DType::i64);
  group.all_gather(all, times)->wait();
  int64_t last_entry = 0, first_exit = INT64_MAX;
  for (int r = 0; r < n; ++r) {
    last_entry = std::max(last_entry, all.data<int64_t>()[2 * r]);
    first_exit = std::min(first_exit, all.data<int64_t>()[2 * r + 1]);
  }
  EXPECT_GE(first_exit, last_entry) << "a rank left the barrier " << (last_entry - first_exit) / 1e6
                                    << " ms before the last rank entered it";
}

}  // namespace
}  // namespace titan::distributed
