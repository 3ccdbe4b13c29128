// The world of one: LocalProcessGroup's collectives are identities or copies,
// it refuses what a one-rank group cannot do, and a process started without a
// launcher gets it as its world.
#include <gtest/gtest.h>

#include "titan/comm/local_process_group.h"
#include "titan/comm/world.h"

namespace titan::comm {
namespace local_process_group_test {

TEST(LocalProcessGroup, CollectivesOfOneRank) {
  LocalProcessGroup group;
  EXPECT_EQ(group.rank(), 0);
  EXPECT_EQ(group.size(), 1);
  EXPECT_EQ(group.name(), "world");

  const std::vector<float> values{1.5f, -2.0f, 3.0f};
  const Tensor tensor = Tensor::from_floats(values, {3});
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    group.all_reduce(tensor, op)->wait();
    EXPECT_EQ(tensor.to_floats(), values) << reduce_op_name(op);
  }
  group.broadcast(tensor, 0)->wait();
  EXPECT_EQ(tensor.to_floats(), values);

  const Tensor gathered = Tensor::zeros({3});
  const auto work = group.all_gather(gathered, tensor);
  EXPECT_TRUE(work->completed());
  EXPECT_EQ(gathered.to_floats(), values);

  const Tensor scattered = Tensor::zeros({3}, DType::bf16);
  group.reduce_scatter(scattered, tensor.to(DType::bf16), ReduceOp::sum)->wait();
  EXPECT_EQ(scattered.to_floats(), values);

  const Tensor rows = Tensor::from_floats(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const Tensor exchanged = Tensor::zeros({2, 2});
  group.all_to_all(exchanged, rows, {2}, {2})->wait();
  EXPECT_EQ(exchanged.to_floats(), rows.to_floats());

  group.barrier();
  EXPECT_EQ(group.stats().collectives, 0);
}

TEST(LocalProcessGroup, RefusesWhatNeedsAPeer) {
  LocalProcessGroup group;
  const Tensor tensor = Tensor::zeros({2});
  EXPECT_THROW(group.broadcast(tensor, 1), Error);
  EXPECT_THROW(group.send(tensor, 1, 0), Error);
  EXPECT_THROW(group.recv(tensor, 1, 0), Error);
  EXPECT_THROW(group.all_gather(Tensor::zeros({3}), tensor), Error);
  EXPECT_THROW(group.reduce_scatter(Tensor::zeros({1}), tensor, ReduceOp::sum), Error);
  EXPECT_THROW(group.all_to_all(Tensor::zeros({2}), tensor, {1}, {2}), Error);
  EXPECT_THROW(group.all_to_all(Tensor::zeros({2}), tensor, {2, 0}, {2, 0}), Error);
  EXPECT_THROW(group.all_reduce(Tensor::zeros({2}, DType::i64), ReduceOp::avg), Error);
  try {
    group.all_reduce(Tensor::zeros({2}, DType::i32), ReduceOp::avg);
    ADD_FAILURE() << "avg of i32 accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("avg of a i32 tensor"), std::string::npos) << error.what();
  }
}

TEST(LocalProcessGroup, SplitGivesAnotherGroupOfOne) {
  LocalProcessGroup group;
  const auto sub = group.split(3, 7, "tp");
  EXPECT_EQ(sub->name(), "tp");
  EXPECT_EQ(sub->rank(), 0);
  EXPECT_EQ(sub->size(), 1);
}

TEST(World, StartedDirectlyIsAWorldOfOne) {
  ASSERT_FALSE(World::started_by_launcher()) << "run this suite without mpirun";
  World& world = World::instance();
  EXPECT_FALSE(world.launched());
  EXPECT_EQ(world.rank(), 0);
  EXPECT_EQ(world.size(), 1);
  EXPECT_EQ(world.local_rank(), 0);
  ASSERT_NE(dynamic_cast<LocalProcessGroup*>(world.group().get()), nullptr);
  EXPECT_EQ(world.group()->name(), "world");
}

TEST(World, MakeProcessGroupPicksTheBackend) {
  EXPECT_EQ(make_process_group("mpi"), World::instance().group());
  try {
    make_process_group("gloo");
    ADD_FAILURE() << "unknown backend accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("unknown process group backend 'gloo'"), std::string::npos)
        << error.what();
  }
  // The nccl backend needs a CUDA build and a visible GPU; this test runs where
  // neither or only the first is there, and checks the error says which.
#ifdef TITAN_WITH_CUDA
  const std::string expected = "no CUDA device is visible";
#else
  const std::string expected = "needs a CUDA build of titan";
#endif
  try {
    const auto group = make_process_group("nccl");
    GTEST_SKIP() << "a GPU is visible: the nccl backend was created (rank " << group->rank() << " of " << group->size()
                 << ")";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
  }
}

}  // namespace local_process_group_test
}  // namespace titan::comm
