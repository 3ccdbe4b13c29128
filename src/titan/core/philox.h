// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11): a counter-based generator. Output depends only on (key, counter), so
// element i of a random tensor is the same number whatever thread or device
// computes it — the property that makes init and dropout reproducible.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TITAN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TITAN_HOST_DEVICE inline
#endif

namespace titan {

struct Philox4x32 {
  uint32_t x[4];
};

TITAN_HOST_DEVICE uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

// counter: 128 bits as (block, stream); key: 64 bits (the seed).
TITAN_HOST_DEVICE Philox4x32 philox4x32_10(uint64_t block, uint64_t stream, uint64_t key) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = philox_mulhilo(kMultiplier0, c0, &hi0);
    const uint32_t lo1 = philox_mulhilo(kMultiplier1, c2, &hi1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return Philox4x32{{c0, c1, c2, c3}};
}

// A uniform double in (0, 1) from 32 random bits: never exactly 0 or 1, so
// log() and the inverse normal CDF stay finite.
TITAN_HOST_DEVICE double philox_uniform(uint32_t bits) { return (static_cast<double>(bits) + 0.5) * 0x1.0p-32; }

}  // namespace titan
