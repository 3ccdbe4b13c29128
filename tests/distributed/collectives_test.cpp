// Every collective of the mpi backend on the world group, checked against
// values each rank computes for itself: all_reduce (sum, avg, max in f32,
// bf16 and i64), all_gather, reduce_scatter, broadcast and all_to_all,
// including odd sizes, a non-zero root and uneven splits with empty parts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "distributed/mpi_test_support.h"
#include "titan/core/profiler.h"

namespace titan::comm {
namespace collectives_test {

using testing::f32_tensor;
using testing::i64_tensor;
using testing::world;

// A value rank r holds at index i, different for every (r, i) and exact in f32.
float value(int r, int64_t i) { return static_cast<float>(r + 1) * 3.0f + static_cast<float>(i) * 0.5f; }

std::vector<float> values_of(int r, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = value(r, i);
  return out;
}

TEST(Collectives, AllReduceSumAvgMaxF32) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  constexpr int64_t kCount = 37;
  const Tensor sum = f32_tensor(values_of(me, kCount));
  const Tensor avg = f32_tensor(values_of(me, kCount));
  // Signs and order differ by rank, so max is neither the sum nor a fixed rank's value.
  std::vector<float> mine(kCount);
  for (int64_t i = 0; i < kCount; ++i) mine[i] = static_cast<float>((i * 7 + me * 5) % 11) - 5.5f;
  const Tensor max = f32_tensor(mine);
  group.all_reduce(sum, ReduceOp::sum)->wait();
  group.all_reduce(avg, ReduceOp::avg)->wait();
  group.all_reduce(max, ReduceOp::max)->wait();
  const auto got_sum = sum.to_floats(), got_avg = avg.to_floats(), got_max = max.to_floats();
  for (int64_t i = 0; i < kCount; ++i) {
    double expected_sum = 0.0;
    float expected_max = -1e30f;
    for (int r = 0; r < n; ++r) {
      expected_sum += value(r, i);
      expected_max = std::max(expected_max, static_cast<float>((i * 7 + r * 5) % 11) - 5.5f);
    }
    EXPECT_EQ(got_sum[i], static_cast<float>(expected_sum)) << "sum at " << i;
    EXPECT_NEAR(got_avg[i], expected_sum / n, 1e-6 * expected_sum) << "avg at " << i;
    EXPECT_EQ(got_max[i], expected_max) << "max at " << i;
  }
}

// From 16 MiB the backend runs its own ring (reduce-scatter, then all-gather)
// instead of MPI_Allreduce: sums, averages and maxima of a count that does not
// split evenly over the ranks (the padded path) and of one that does, in f32
// and i64, equal the values each rank computes for itself on every rank.
// (A suite of its own: under ThreadSanitizer, whose stage leaves it out, one
// such all-reduce outlasts the 30 s collective timeout; its threads are the
// small path's.)
TEST(LargeCollectives, AllReducesTakeTheRingAndStayExact) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  for (const int64_t count : {int64_t{(16 << 20) / 4 + 3}, int64_t{(16 << 20) / 4 * 3}}) {
    // Small integers times 0.25: exact in f32 whatever order the ring adds them in.
    const auto small = [](int r, int64_t i) { return static_cast<float>((i * 13 + r * 7) % 97) * 0.25f - 12.0f; };
    std::vector<float> mine(static_cast<size_t>(count));
    std::vector<int64_t> mine_i64(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      mine[static_cast<size_t>(i)] = small(me, i);
      mine_i64[static_cast<size_t>(i)] = (i % 1000003) * (me + 1) - 5;
    }
    const Tensor sum = f32_tensor(mine), avg = f32_tensor(mine), max = f32_tensor(mine);
    const Tensor sum_i64 = i64_tensor(mine_i64);
    group.all_reduce(sum, ReduceOp::sum)->wait();
    group.all_reduce(avg, ReduceOp::avg)->wait();
    group.all_reduce(max, ReduceOp::max)->wait();
    group.all_reduce(sum_i64, ReduceOp::sum)->wait();
    const float* got_sum = sum.data<float>();
    const float* got_avg = avg.data<float>();
    const float* got_max = max.data<float>();
    const int64_t* got_i64 = sum_i64.data<int64_t>();
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i) {
      float expected_sum = 0.0f, expected_max = -1e30f;
      int64_t expected_i64 = 0;
      for (int r = 0; r < n; ++r) {
        expected_sum += small(r, i);
        expected_max = std::max(expected_max, small(r, i));
        expected_i64 += (i % 1000003) * (r + 1) - 5;
      }
      const bool right = got_sum[i] == expected_sum && got_max[i] == expected_max && got_i64[i] == expected_i64 &&
                         std::abs(got_avg[i] - expected_sum / static_cast<float>(n)) <= 1e-6f * std::abs(expected_sum);
      if (!right && wrong++ < 5) ADD_FAILURE() << "count " << count << ": wrong at " << i;
    }
    EXPECT_EQ(wrong, 0) << "count " << count;
  }
}

// MPI has no bf16 arithmetic: the backend reduces an f32 copy and rounds once.
TEST(Collectives, AllReduceBf16) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  constexpr int64_t kCount = 9;
  std::vector<float> mine(kCount), signed_values(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    mine[i] = static_cast<float>(2 * me + i);
    signed_values[i] = static_cast<float>(((i + me) % 3) - 1) * static_cast<float>(me + 1);
  }
  const Tensor sum = Tensor::from_floats(mine, {kCount}, DType::bf16);
  const Tensor avg = Tensor::from_floats(mine, {kCount}, DType::bf16);
  const Tensor max = Tensor::from_floats(signed_values, {kCount}, DType::bf16);
  group.all_reduce(sum, ReduceOp::sum)->wait();
  group.all_reduce(avg, ReduceOp::avg)->wait();
  group.all_reduce(max, ReduceOp::max)->wait();
  EXPECT_EQ(sum.dtype(), DType::bf16);
  const auto got_sum = sum.to_floats(), got_avg = avg.to_floats(), got_max = max.to_floats();
  for (int64_t i = 0; i < kCount; ++i) {
    float expected_sum = 0.0f, expected_max = -1e30f;
    for (int r = 0; r < n; ++r) {
      expected_sum += static_cast<float>(2 * r + i);
      expected_max = std::max(expected_max, static_cast<float>(((i + r) % 3) - 1) * static_cast<float>(r + 1));
    }
    EXPECT_EQ(got_sum[i], expected_sum) << i;
    EXPECT_EQ(got_avg[i], static_cast<float>(n - 1 + i)) << i;  // mean of 2r + i
    EXPECT_EQ(got_max[i], expected_max) << i;
  }
}

// 256 on rank 0 and 1 everywhere else: summed in bf16 one pair at a time every
// 256 + 1 rounds back to 256 (bf16 steps by 2 there), while the f32 sum
// 256 + (n - 1) rounds once to the nearest bf16: 256, 258, 260 for 2, 3, 4 ranks.
TEST(Collectives, AllReduceBf16RoundsOnceFromF32) {
  ProcessGroup& group = world();
  const int n = group.size();
  if (n > 4) GTEST_SKIP() << "expected values listed for 2 to 4 ranks";
  const float expected[] = {256.0f, 256.0f, 256.0f, 258.0f, 260.0f};
  const std::vector<float> mine(3, group.rank() == 0 ? 256.0f : 1.0f);
  const Tensor all_reduced = Tensor::from_floats(mine, {3}, DType::bf16);
  group.all_reduce(all_reduced, ReduceOp::sum)->wait();
  EXPECT_EQ(all_reduced.to_floats(), std::vector<float>(3, expected[n]));

  // reduce_scatter widens the same way.
  const Tensor input = Tensor::from_floats(std::vector<float>(3 * n, mine[0]), {3 * n}, DType::bf16);
  const Tensor output = Tensor::zeros({3}, DType::bf16);
  group.reduce_scatter(output, input, ReduceOp::sum)->wait();
  EXPECT_EQ(output.to_floats(), std::vector<float>(3, expected[n]));
}

// Values past 2^53 show the reduction never passes through a double.
TEST(Collectives, AllReduceI64) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  constexpr int64_t kBig = int64_t{1} << 53, kHuge = int64_t{1} << 60;
  std::vector<int64_t> sum_in, max_in;
  for (int64_t i = 0; i < 6; ++i) {
    sum_in.push_back(kBig + me * 1000 + i);
    max_in.push_back(i % 2 == 0 ? kHuge + me : -kHuge - me);
  }
  const Tensor sum = i64_tensor(sum_in), max = i64_tensor(max_in);
  group.all_reduce(sum, ReduceOp::sum)->wait();
  group.all_reduce(max, ReduceOp::max)->wait();
  const int64_t rank_sum = static_cast<int64_t>(n) * (n - 1) / 2;
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(sum.data<int64_t>()[i], n * kBig + rank_sum * 1000 + n * i) << i;
    EXPECT_EQ(max.data<int64_t>()[i], i % 2 == 0 ? kHuge + (n - 1) : -kHuge) << i;
  }
  // An integer mean would truncate: refused on every rank before anything is sent.
  EXPECT_THROW(group.all_reduce(sum, ReduceOp::avg), Error);
  EXPECT_THROW(group.reduce_scatter(Tensor::zeros({1}, DType::i64), Tensor::zeros({n}, DType::i64), ReduceOp::avg),
               Error);
}

TEST(Collectives, AllGather) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  // An odd length in f32.
  const Tensor input = f32_tensor(values_of(me, 5));
  const Tensor output = Tensor::full({n * 5}, -1.0);
  group.all_gather(output, input)->wait();
  std::vector<float> expected;
  for (int r = 0; r < n; ++r) {
    for (float v : values_of(r, 5)) expected.push_back(v);
  }
  EXPECT_EQ(output.to_floats(), expected);

  // Rows of i64 (shape [n * 3, 2]) and bf16 (exact small integers).
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < 6; ++i) rows.push_back(me * 100 + i);
  const Tensor i64_out = Tensor::zeros({n * 3, 2}, DType::i64);
  group.all_gather(i64_out, Tensor::from_vector(rows, {3, 2}))->wait();
  const Tensor bf16_out = Tensor::zeros({n * 3}, DType::bf16);
  group
      .all_gather(bf16_out,
                  Tensor::from_floats(std::vector<float>{me * 8.0f, me * 8.0f + 1, me * 8.0f + 2}, {3}, DType::bf16))
      ->wait();
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(i64_out.data<int64_t>()[r * 6 + i], r * 100 + i) << r << " " << i;
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(bf16_out.to_floats()[r * 3 + i], r * 8.0f + i) << r << " " << i;
  }

  // The output must hold exactly size() inputs.
  EXPECT_THROW(group.all_gather(Tensor::zeros({n * 5 + 1}), input), Error);
}

TEST(Collectives, ReduceScatter) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  constexpr int64_t kBlock = 3;  // odd
  std::vector<float> input_values;
  for (int64_t j = 0; j < n * kBlock; ++j) input_values.push_back(static_cast<float>(me * 10 + j) * 0.5f);
  const Tensor input = f32_tensor(input_values);
  const Tensor sum = Tensor::zeros({kBlock}), avg = Tensor::zeros({kBlock}), max = Tensor::zeros({kBlock});
  group.reduce_scatter(sum, input, ReduceOp::sum)->wait();
  group.reduce_scatter(avg, input, ReduceOp::avg)->wait();
  // Max of values that fall with the rank for even j and rise for odd j.
  std::vector<float> zigzag;
  for (int64_t j = 0; j < n * kBlock; ++j) zigzag.push_back(static_cast<float>(j % 2 == 0 ? -me : me) + j);
  group.reduce_scatter(max, f32_tensor(zigzag), ReduceOp::max)->wait();
  for (int64_t i = 0; i < kBlock; ++i) {
    const int64_t j = me * kBlock + i;  // this rank keeps block `me`
    double expected = 0.0;
    for (int r = 0; r < n; ++r) expected += static_cast<float>(r * 10 + j) * 0.5f;
    EXPECT_EQ(sum.to_floats()[i], static_cast<float>(expected)) << i;
    EXPECT_NEAR(avg.to_floats()[i], expected / n, 1e-6 * std::abs(expected) + 1e-6) << i;
    EXPECT_EQ(max.to_floats()[i], static_cast<float>(j % 2 == 0 ? j : j + n - 1)) << i;
  }

  // bf16, 5-element blocks of small integers.
  std::vector<float> bf16_values;
  for (int64_t j = 0; j < n * 5; ++j) bf16_values.push_back(static_cast<float>(me + j));
  const Tensor bf16_out = Tensor::zeros({5}, DType::bf16);
  group.reduce_scatter(bf16_out, Tensor::from_floats(bf16_values, {n * 5}, DType::bf16), ReduceOp::sum)->wait();
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_EQ(bf16_out.to_floats()[i], static_cast<float>(n * (me * 5 + i) + n * (n - 1) / 2)) << i;
  }
  EXPECT_THROW(group.reduce_scatter(Tensor::zeros({kBlock + 1}), input, ReduceOp::sum), Error);
}

TEST(Collectives, BroadcastFromNonZeroRoot) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  const int root = n - 1;
  std::vector<float> pattern;
  for (int64_t i = 0; i < 11; ++i) pattern.push_back(7.0f * i - 3.0f);
  const Tensor tensor = me == root ? f32_tensor(pattern) : Tensor::full({11}, -1.0);
  group.broadcast(tensor, root)->wait();
  EXPECT_EQ(tensor.to_floats(), pattern);

  const Tensor ints = me == 1 ? i64_tensor({int64_t{1} << 62, -5, 9}) : i64_tensor({0, 0, 0});
  const Tensor halves = me == 1 ? Tensor::from_floats(std::vector<float>{0.5f, -2.0f}, {2}, DType::bf16)
                                : Tensor::zeros({2}, DType::bf16);
  group.broadcast(ints, 1)->wait();
  group.broadcast(halves, 1)->wait();
  EXPECT_EQ(ints.to_ints(), (std::vector<int64_t>{int64_t{1} << 62, -5, 9}));
  EXPECT_EQ(halves.to_floats(), (std::vector<float>{0.5f, -2.0f}));

  EXPECT_THROW(group.broadcast(tensor, n), Error);
}

// Rank `from` sends `rows(from, to)` rows to rank `to`: 0, 1 or 2, so some
// pairs (self included, on some ranks) exchange nothing.
int64_t rows(int from, int to) { return (from + 2 * to) % 3; }

// Element `col` of row `row` that `from` sends to `to`.
float cell(int from, int to, int64_t row, int64_t col) {
  return static_cast<float>(1000 * from + 100 * to + 10 * row + col);
}

TEST(Collectives, AllToAllUnevenSplits) {
  ProcessGroup& group = world();
  const int n = group.size(), me = group.rank();
  constexpr int64_t kWidth = 2;
  std::vector<int64_t> input_splits, output_splits;
  std::vector<float> input_values, expected;
  std::vector<int64_t> input_ints, expected_ints;
  for (int p = 0; p < n; ++p) {
    input_splits.push_back(rows(me, p));
    output_splits.push_back(rows(p, me));
    for (int64_t row = 0; row < rows(me, p); ++row) {
      for (int64_t col = 0; col < kWidth; ++col) input_values.push_back(cell(me, p, row, col));
      input_ints.push_back(static_cast<int64_t>(cell(me, p, row, 0)) << 32);
    }
    for (int64_t row = 0; row < rows(p, me); ++row) {
      for (int64_t col = 0; col < kWidth; ++col) expected.push_back(cell(p, me, row, col));
      expected_ints.push_back(static_cast<int64_t>(cell(p, me, row, 0)) << 32);
    }
  }
  const int64_t in_rows = static_cast<int64_t>(input_ints.size()),
                out_rows = static_cast<int64_t>(expected_ints.size());
  const Tensor input = Tensor::from_floats(input_values, {in_rows, kWidth});
  const Tensor output = Tensor::full({out_rows, kWidth}, -1.0);
  group.all_to_all(output, input, output_splits, input_splits)->wait();
  EXPECT_EQ(output.to_floats(), expected);

  const Tensor ints_out = Tensor::zeros({out_rows}, DType::i64);
  group.all_to_all(ints_out, Tensor::from_vector(input_ints, {in_rows}), output_splits, input_splits)->wait();
  EXPECT_EQ(ints_out.to_ints(), expected_ints);

  // Splits that do not add up to the rows, or a missing peer, are refused on the spot.
  std::vector<int64_t> too_many = input_splits;
  too_many[0] += 1;
  EXPECT_THROW(group.all_to_all(output, input, output_splits, too_many), Error);
  EXPECT_THROW(group.all_to_all(output, input, output_splits, std::vector<int64_t>(n + 1, 0)), Error);
}

}  // namespace collectives_test
}  // namespace titan::comm

namespace titan::comm {
namespace collectives_test {

// Under the profiler each collective is a span on its group's own track (the
// worker thread) carrying its byte counts, group and sequence number, and the
// caller's wait for it is a span on the calling thread.
TEST(Collectives, ProfilerRecordsEachCollectiveWithItsBytes) {
  ProcessGroup& group = world();
  const int n = group.size();
  const Tensor reduced = testing::f32_tensor(values_of(group.rank(), 1000));
  const Tensor input = testing::f32_tensor(values_of(group.rank(), 24));
  const Tensor gathered = Tensor::empty({24 * n}, DType::f32);
  group.barrier();
  profiler::start();
  const int caller = profiler::thread_index();
  group.all_reduce(reduced, ReduceOp::sum)->wait();
  group.all_gather(gathered, input)->wait();
  const std::vector<profiler::Event> events = profiler::stop();
  std::vector<const profiler::Event*> comm, waits;
  for (const profiler::Event& e : events) {
    if (e.category == "comm") comm.push_back(&e);
    if (e.category == "wait") waits.push_back(&e);
  }
  ASSERT_EQ(comm.size(), 2u);
  EXPECT_EQ(comm[0]->name, "all_reduce");
  EXPECT_EQ(comm[0]->args["bytes_in"], 4000);
  EXPECT_EQ(comm[0]->args["bytes_out"], 4000);
  EXPECT_EQ(comm[1]->name, "all_gather");
  EXPECT_EQ(comm[1]->args["bytes_in"], 24 * 4);
  EXPECT_EQ(comm[1]->args["bytes_out"], 24 * 4 * n);
  EXPECT_EQ(comm[0]->args["group"], group.name());
  EXPECT_EQ(comm[1]->args["sequence"].get<uint64_t>(), comm[0]->args["sequence"].get<uint64_t>() + 1);
  // The collectives ran on the group's worker, the waits on this thread.
  EXPECT_NE(comm[0]->thread, caller);
  ASSERT_EQ(waits.size(), 2u);
  for (const profiler::Event* wait : waits) EXPECT_EQ(wait->thread, caller);
}

}  // namespace collectives_test
}  // namespace titan::comm
