// The Gloo process group on loopback: three members (threads) meeting through
// an in-process lighthouse's store; its collectives against plain sums; and a
// member that goes away makes the others' next collective throw GlooPeerLost
// within the timeout instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "titan/comm/gloo_process_group.h"
#include "titan/comm/gloo_store.h"
#include "titan/comm/lighthouse_server.h"

namespace titan::comm {
namespace gloo_process_group_test {

class GlooGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LighthouseServer::Options options;
    options.bind = "127.0.0.1:0";
    options.quorum_tick_ms = 5;
    server_ = std::make_unique<LighthouseServer>(options);
    address_ = "127.0.0.1:" + std::to_string(server_->port());
    serving_ = std::thread([this] { server_->serve(); });
  }
  void TearDown() override {
    server_->stop();
    serving_.join();
  }
  std::unique_ptr<GlooProcessGroup> connect(const std::string& prefix, int rank, int size, int timeout_ms) {
    LighthouseStore store(address_, prefix, 10000);
    return std::make_unique<GlooProcessGroup>(store, rank, size, std::chrono::milliseconds(timeout_ms), "test");
  }

  std::unique_ptr<LighthouseServer> server_;
  std::string address_;
  std::thread serving_;
};

TEST_F(GlooGroupTest, AllReduceAndBroadcastMatchPlainSums) {
  constexpr int kMembers = 3;
  std::vector<std::future<std::vector<float>>> results;
  for (int rank = 0; rank < kMembers; ++rank) {
    results.push_back(std::async(std::launch::async, [this, rank] {
      auto group = connect("a/", rank, kMembers, 10000);
      // 3000 values: more than one ring segment per member.
      std::vector<float> mine(3000);
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i);
      const Tensor sums = Tensor::from_floats(mine, {3000});
      group->all_reduce(sums, ReduceOp::avg);
      const Tensor counts = Tensor::from_vector(std::vector<int64_t>{rank, 10}, {2});
      group->all_reduce(counts, ReduceOp::max);
      EXPECT_EQ(counts.to_ints(), (std::vector<int64_t>{kMembers - 1, 10}));
      const Tensor shared = Tensor::from_floats(std::vector<float>{static_cast<float>(rank), 7.0f}, {2});
      group->broadcast(shared, 1);
      EXPECT_EQ(shared.to_floats(), (std::vector<float>{1.0f, 7.0f}));
      group->barrier();
      return sums.to_floats();
    }));
  }
  std::vector<std::vector<float>> got;
  for (auto& result : results) got.push_back(result.get());
  for (size_t i = 0; i < 3000; ++i) {
    float sum = 0.0f;
    for (int rank = 0; rank < kMembers; ++rank) sum += static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i);
    ASSERT_FLOAT_EQ(got[0][i], sum / kMembers) << i;
  }
  // Every member holds the same bits (what keeps replica groups' weights equal).
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(got[0], got[2]);
}

TEST_F(GlooGroupTest, ALostMemberMakesTheOthersThrowNotHang) {
  constexpr int kMembers = 3;
  std::promise<void> connected[kMembers];
  std::shared_future<void> all_connected[kMembers];
  for (int i = 0; i < kMembers; ++i) all_connected[i] = connected[i].get_future().share();
  std::vector<std::future<std::string>> results;
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < kMembers; ++rank) {
    results.push_back(std::async(std::launch::async, [&, rank]() -> std::string {
      auto group = connect("b/", rank, kMembers, 3000);
      connected[rank].set_value();
      for (auto& other : all_connected) other.wait();
      if (rank == 2) {
        group.reset();  // closes its connections, as a killed process's kernel would
        return "gone";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const Tensor values = Tensor::zeros({100});
      try {
        group->all_reduce(values, ReduceOp::sum);
      } catch (const GlooPeerLost& error) {
        return error.what();
      }
      return "no error";
    }));
  }
  EXPECT_EQ(results[2].get(), "gone");
  for (int rank = 0; rank < 2; ++rank) {
    const std::string message = results[rank].get();
    EXPECT_NE(message.find("all_reduce failed on member"), std::string::npos) << message;
  }
  // Within the 3 s timeout (plus slack), not a hang.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 8.0);
}

TEST_F(GlooGroupTest, UnsupportedCollectivesSaySo) {
  auto group = connect("c/", 0, 1, 1000);
  const Tensor t = Tensor::zeros({2});
  EXPECT_THROW(group->all_gather(t, t), Error);
  // A group of one reduces nothing; the dtype check still runs for a real group only.
  EXPECT_NO_THROW(group->all_reduce(t, ReduceOp::sum));
}

}  // namespace gloo_process_group_test
}  // namespace titan::comm
