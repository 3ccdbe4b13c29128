// send/recv around a ring of ranks, and barrier.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "distributed/mpi_test_support.h"

namespace titan::comm {
namespace point_to_point_test {

using testing::world;

// Large enough (256 KiB) that MPI cannot buffer it eagerly: each send waits
// for its matching receive.
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

// What pipeline schedules do: every rank posts all its receives first, in the
// opposite order to its peer's sends, then sends; messages too large to be
// buffered eagerly. Posted requests complete in any order, so nobody waits
// for a send queued behind a receive.
TEST(PointToPoint, ReceivesPostedBeforeSendsInAnyOrder) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  constexpr int64_t kCount = int64_t{1} << 16;
  constexpr int kMessages = 4;
  std::vector<Tensor> incoming;
  std::vector<std::shared_ptr<Work>> works;
  for (int m = kMessages - 1; m >= 0; --m) {
    incoming.push_back(Tensor::full({kCount}, -1.0));
    works.push_back(group.recv(incoming.back(), left, 100 + m));
  }
  std::vector<Tensor> outgoing;
  for (int m = 0; m < kMessages; ++m) {
    outgoing.push_back(Tensor::full({kCount}, static_cast<double>(me * 10 + m)));
    works.push_back(group.send(outgoing.back(), right, 100 + m));
  }
  for (const auto& work : works) work->wait();
  for (int i = 0; i < kMessages; ++i) {
    const int m = kMessages - 1 - i;
    const auto got = incoming[static_cast<size_t>(i)].to_floats();
    EXPECT_EQ(got.front(), static_cast<float>(left * 10 + m)) << "message " << m;
    EXPECT_EQ(got.back(), static_cast<float>(left * 10 + m)) << "message " << m;
  }
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

}  // namespace point_to_point_test
}  // namespace titan::comm
