// Helpers for tests that run on every rank of an mpirun job: the world group,
// small tensors from values each rank computes itself, and the world ranks
// that make up a group (found by all-gathering them over it).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "titan/comm/world.h"

namespace titan::comm::testing {

inline ProcessGroup& world() { return *World::instance().group(); }

inline Tensor f32_tensor(const std::vector<float>& values) {
  return Tensor::from_floats(values, {static_cast<int64_t>(values.size())});
}

inline Tensor i64_tensor(const std::vector<int64_t>& values) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())});
}

// The world rank of each member of `group`, in the group's rank order.
inline std::vector<int64_t> member_world_ranks(ProcessGroup& group) {
  const Tensor mine = i64_tensor({World::instance().rank()});
  const Tensor all = Tensor::zeros({group.size()}, DType::i64);
  group.all_gather(all, mine)->wait();
  return all.to_ints();
}

// Skips the test unless the job has one of `sizes` ranks (the same on every rank).
#define TITAN_REQUIRE_WORLD_SIZE(...)                                                                \
  do {                                                                                               \
    const std::vector<int> titan_sizes{__VA_ARGS__};                                                 \
    if (std::find(titan_sizes.begin(), titan_sizes.end(), ::titan::comm::testing::world().size()) == \
        titan_sizes.end()) {                                                                         \
      GTEST_SKIP() << "needs a world of " << ::testing::PrintToString(titan_sizes) << " ranks";      \
    }                                                                                                \
  } while (0)

}  // namespace titan::comm::testing
