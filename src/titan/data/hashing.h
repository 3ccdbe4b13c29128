// A fast, fixed 64-bit hash of byte strings: the key of the tokenizer's hash
// tables and the checksum of token shards (so it must never change: shard
// files on disk depend on it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace titan::data {

inline uint64_t hash_mix(uint64_t x) {
  // The splitmix64 finaliser: every input bit affects every output bit.
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// Eight bytes per step, multiply-rotate; the tail is read as one partial word
// tagged with its length, so "a" and "a\0" differ.
inline uint64_t hash_bytes(const void* data, size_t size, uint64_t seed = 0) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed ^ (0x9E3779B97F4A7C15ull * (size + 1));
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, p + i, 8);
    h = (h ^ (word * 0xC2B2AE3D27D4EB4Full)) * 0x9E3779B185EBCA87ull;
    h = (h << 31) | (h >> 33);
  }
  uint64_t tail = 0;
  if (i < size) std::memcpy(&tail, p + i, size - i);
  h ^= tail * 0x165667B19E3779F9ull;
  return hash_mix(h);
}

inline uint64_t hash_bytes(std::string_view bytes, uint64_t seed = 0) {
  return hash_bytes(bytes.data(), bytes.size(), seed);
}

}  // namespace titan::data
