// RoutedProcessGroup: host tensors take the host backend, barriers too, a
// split splits both backends, and statistics add up. (The device route needs
// a GPU; CUDA tensors are the only non-host tensors that exist.)
#include "titan/comm/routed_process_group.h"

#include <gtest/gtest.h>

#include "support/expect_error.h"
#include "titan/comm/local_process_group.h"

namespace titan::comm {
namespace routed_process_group_test {

// A world-of-one group that counts the calls it serves.
class CountingGroup final : public ProcessGroup {
 public:
  explicit CountingGroup(std::string name, int rank = 0, int size = 1) : ProcessGroup(rank, size, std::move(name)) {}
  int calls = 0, barriers = 0, splits = 0;
  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) override { return served().all_reduce(t, op); }
  std::shared_ptr<Work> all_gather(const Tensor& o, const Tensor& i) override { return served().all_gather(o, i); }
  std::shared_ptr<Work> reduce_scatter(const Tensor& o, const Tensor& i, ReduceOp op) override {
    return served().reduce_scatter(o, i, op);
  }
  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override { return served().broadcast(t, root); }
  std::shared_ptr<Work> all_to_all(const Tensor& o, const Tensor& i, const std::vector<int64_t>& os,
                                   const std::vector<int64_t>& is) override {
    return served().all_to_all(o, i, os, is);
  }
  std::shared_ptr<Work> send(const Tensor& t, int peer, int tag) override { return served().send(t, peer, tag); }
  std::shared_ptr<Work> recv(const Tensor& t, int peer, int tag) override { return served().recv(t, peer, tag); }
  void barrier() override { ++barriers; }
  std::shared_ptr<ProcessGroup> split(int, int, const std::string& name) override {
    ++splits;
    return std::make_shared<CountingGroup>(name);
  }
  CommStats stats() const override { return {.busy_seconds = 1.0, .exposed_seconds = 0.5, .collectives = calls}; }
  void reset_stats() override { calls = 0; }

 private:
  LocalProcessGroup& served() {
    ++calls;
    return local_;
  }
  LocalProcessGroup local_;
};

TEST(RoutedProcessGroup, HostTensorsAndBarriersTakeTheHostBackend) {
  auto host = std::make_shared<CountingGroup>("host"), device = std::make_shared<CountingGroup>("device");
  RoutedProcessGroup group(host, device);
  const Tensor t = Tensor::from_floats(std::vector<float>{1.0f, 2.0f}, {2});
  group.all_reduce(t, ReduceOp::sum)->wait();
  group.broadcast(t, 0)->wait();
  const Tensor out = Tensor::zeros({2});
  group.all_gather(out, t)->wait();
  group.reduce_scatter(out, t, ReduceOp::sum)->wait();
  group.barrier();
  EXPECT_EQ(host->calls, 4);
  EXPECT_EQ(host->barriers, 1);
  EXPECT_EQ(device->calls, 0);
  EXPECT_EQ(out.to_floats(), (std::vector<float>{1.0f, 2.0f}));

  const CommStats stats = group.stats();
  EXPECT_DOUBLE_EQ(stats.busy_seconds, 2.0);
  EXPECT_EQ(stats.collectives, 4);
  group.reset_stats();
  EXPECT_EQ(host->calls, 0);

  const auto sub = group.split(0, 0, "dp");
  EXPECT_EQ(host->splits, 1);
  EXPECT_EQ(device->splits, 1);
  EXPECT_EQ(sub->name(), "dp");
}

TEST(RoutedProcessGroup, BackendsMustSpanTheSameRanks) {
  testing::expect_error(
      [] {
        RoutedProcessGroup group(std::make_shared<CountingGroup>("host", 0, 1),
                                 std::make_shared<CountingGroup>("device", 1, 2));
      },
      {"routed group 'host'", "rank 1 of 2"});
}

}  // namespace routed_process_group_test
}  // namespace titan::comm
