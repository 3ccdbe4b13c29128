// The random-number state of a run: a seed and how many Philox blocks have
// been used. Random ops reserve a contiguous range of blocks, so results do
// not depend on threads or devices, and the state checkpoints as two numbers.
#pragma once

#include <cstdint>

namespace titan {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `blocks` 4-number Philox blocks; returns the first one's index.
  uint64_t reserve(uint64_t blocks) {
    const uint64_t first = offset_;
    offset_ += blocks;
    return first;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

}  // namespace titan
