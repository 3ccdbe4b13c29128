// Shared helpers for the CPU kernels: element loads/stores that convert
// bf16 <-> f32, a vectorisable exp, and a parallel loop. Kernel files include
// this and are compiled once per ISA (see src/titan/CMakeLists.txt), so plain
// loops here become AVX-512, AVX2+FMA or portable code, one copy each.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "titan/core/dtype.h"
#include "titan/ops/dispatch.h"

#ifndef TITAN_ISA
#error "kernel files are compiled with TITAN_ISA set to the ISA namespace"
#endif

// Everything below (and the rest of the including file, which must include
// this header last) is compiled for the copy's ISA. Functions defined in
// headers above stay baseline code, so no shared symbol is ever AVX2- or
// AVX-512-only. tests/lint/kernel_includes.sh checks the include order.
#if defined(TITAN_ISA_AVX512)
#pragma GCC target( \
    "avx512f,avx512bw,avx512dq,avx512vl,avx512cd,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,prefer-vector-width=512")
#elif defined(TITAN_ISA_AVX2)
// x86-64-v3: what every AVX2 CPU since Haswell and Zen 1 has.
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,movbe")
#endif

namespace titan::ops::cpu::TITAN_ISA {

inline float to_f32(float value) { return value; }
inline float to_f32(bf16 value) {
  const uint32_t word = static_cast<uint32_t>(value.bits) << 16;
  float result;
  std::memcpy(&result, &word, sizeof(result));
  return result;
}

template <typename T>
inline T from_f32(float value);
template <>
inline float from_f32<float>(float value) {
  return value;
}
// Branch-free round-to-nearest-even so the compiler can vectorise it.
template <>
inline bf16 from_f32<bf16>(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  const uint32_t rounded = (word + 0x7fffu + ((word >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (word >> 16) | 0x40u;
  return bf16{static_cast<uint16_t>((word & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}

// exp(x) to about 2 ulp over the f32 range, branch-free: x = n ln2 + r with
// |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^n by building the exponent.
// Inputs below -87.3 (including -inf) give exactly 0, as masked scores need;
// above 88.7 (where f32 exp overflows) +inf; NaN gives NaN, as in PyTorch (and
// is kept out of the float-to-int conversion, where it would be undefined).
inline float fast_exp(float x) {
  const float clamped = std::min(std::max(x == x ? x : 0.0f, -87.3f), 88.7f);
  // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer in any ISA.
  const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = clamped - n * 0.693145751953125f;  // ln2 split in two for an exact n*ln2_hi
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t exponent_bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &exponent_bits, sizeof(scale));
  const float result = x < -87.3f ? 0.0f : (x > 88.7f ? std::numeric_limits<float>::infinity() : p * scale);
  return x == x ? result : x;
}

inline float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

// Runs body(begin, end) over [0, n) in contiguous chunks of at least `grain`,
// one chunk range per thread (static schedule: reproducible partitioning).
template <typename Body>
inline void parallel_for(int64_t n, int64_t grain, Body&& body) {
  if (n <= 0) return;
  const int64_t max_threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(max_threads, n / std::max<int64_t>(grain, 1)));
  if (chunks == 1) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static, 1)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t begin = n * chunk / chunks;
    const int64_t end = n * (chunk + 1) / chunks;
    body(begin, end);
  }
}

}  // namespace titan::ops::cpu::TITAN_ISA

namespace titan::ops::cpu::TITAN_ISA {

// Calls body(T{}) with T = float or bf16 for the tensor's dtype; anything
// else is the op's unsupported-dtype error (raised here, outside any
// parallel region, where throwing is safe).
template <typename Body>
inline void dispatch_float(const char* op, DType dtype, Body&& body) {
  switch (dtype) {
    case DType::f32:
      body(float{});
      return;
    case DType::bf16:
      body(bf16{});
      return;
    default:
      unsupported_dtype(op, Device::cpu(), dtype);
  }
}

}  // namespace titan::ops::cpu::TITAN_ISA
