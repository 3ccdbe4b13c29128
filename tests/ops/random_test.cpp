// CUDA random fills against the CPU ones, for the same seed and generator
// offsets, compared bit by bit. The CPU fills' own checks (statistics, bounds,
// thread-count independence) stay in tests/core/random_test.cpp, beside the
// Philox generator's: they are what links the ops library, and so its kernel
// registration, into the core suite, whose Tensor tests need the kernels.
//
// Uniform fills are pure double arithmetic (Philox bits, one multiply, one
// add, unfused on both sides), so they must be bitwise equal everywhere.
// Normal and truncated-normal fills also go through double log, sin, cos,
// erfc and exp, whose last bits differ between glibc and CUDA's libdevice; the
// f32 result then differs only for a value within a few double ulps of an f32
// rounding boundary. For Box-Muller that is ~1e-9 per element; the truncated
// normal's inverse CDF refines x against erfc, so near x = 0 its relative
// error is larger, ~2e-7 per element overall. Those fills must therefore be
// bitwise equal in all but at most one element plus 1 in 1e5, and any element that
// differs must differ by one unit in the last place: a real bug (a wrong
// lane, offset or formula) changes nearly every element by far more.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "support/cuda.h"

namespace titan::testing {
namespace random_test {

uint64_t element_bits(const Tensor& t, int64_t i) {
  const size_t size = t.element_size();
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const unsigned char*>(t.data_ptr()) + i * static_cast<int64_t>(size), size);
  return bits;
}

// Floats of one format are this many representable values apart (0 only for
// identical bits; -0 and +0 count as one apart).
int64_t ulps_between(uint64_t a, uint64_t b, size_t size) {
  if (a == b) return 0;
  const uint64_t sign = uint64_t{1} << (8 * size - 1);
  const auto ordered = [&](uint64_t bits) {
    const auto magnitude = static_cast<int64_t>(bits & (sign - 1));
    return (bits & sign) ? -magnitude : magnitude;
  };
  return std::max<int64_t>(1, std::llabs(ordered(a) - ordered(b)));
}

// At most `allowed_differing` elements differ, each by at most one ulp.
::testing::AssertionResult same_bits(const Tensor& actual, const Tensor& expected, int64_t allowed_differing = 0) {
  const Tensor a = on_cpu(actual).contiguous(), e = expected.contiguous();
  if (a.dtype() != e.dtype() || a.shape() != e.shape()) return ::testing::AssertionFailure() << "dtype or shape";
  int64_t differing = 0, first = -1, worst_ulps = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const int64_t ulps = ulps_between(element_bits(a, i), element_bits(e, i), a.element_size());
    if (ulps != 0) {
      if (first < 0) first = i;
      ++differing;
      worst_ulps = std::max(worst_ulps, ulps);
    }
  }
  if (differing <= allowed_differing && worst_ulps <= 1) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differing << " of " << a.numel() << " elements differ (" << allowed_differing
                                       << " allowed), by up to " << worst_ulps << " ulp; first at " << first << ": "
                                       << load_element(a.data_ptr(), a.dtype(), first) << " vs "
                                       << load_element(e.data_ptr(), e.dtype(), first);
}

enum class Kind { uniform, normal, truncated };

void draw(const Tensor& t, Kind kind, Generator& generator) {
  switch (kind) {
    case Kind::uniform:
      ops::uniform_(t, -0.3, 1.7, generator);
      break;
    case Kind::normal:
      ops::normal_(t, 0.5, 0.02, generator);
      break;
    case Kind::truncated:
      ops::trunc_normal_(t, 0.0, 1.0, -1.5, 2.0, generator);
      break;
  }
}

// See the header: uniform is exact, the others may differ in the rare element.
int64_t allowed_differing(Kind kind, int64_t numel) { return kind == Kind::uniform ? 0 : 1 + numel / 100000; }

const char* name(Kind kind) {
  return kind == Kind::uniform ? "uniform" : kind == Kind::normal ? "normal" : "trunc_normal";
}

TEST(CudaRandom, BitwiseEqualToCpuForEveryDistributionAndDtype) {
  TITAN_REQUIRE_CUDA();
  for (Kind kind : {Kind::uniform, Kind::normal, Kind::truncated}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f8e4m3, DType::f8e5m2}) {
      for (const Shape& shape : {Shape{1}, Shape{3}, Shape{1027}, Shape{257, 129}, Shape{100003}}) {
        SCOPED_TRACE(std::string(name(kind)) + " " + dtype_name(dtype) + " " + shape_str(shape));
        // Two draws from one generator: the second starts at a non-zero block offset.
        Generator host_generator(1234), device_generator(1234);
        for (int draw_index = 0; draw_index < 2; ++draw_index) {
          Tensor host = Tensor::empty(shape, dtype);
          Tensor device = Tensor::empty(shape, dtype, Device::cuda());
          draw(host, kind, host_generator);
          draw(device, kind, device_generator);
          EXPECT_TRUE(same_bits(device, host, allowed_differing(kind, host.numel()))) << "draw " << draw_index;
        }
        EXPECT_EQ(device_generator.offset(), host_generator.offset());
      }
    }
  }
}

// A large fill, past one grid's worth of Philox blocks, and a strided target.
TEST(CudaRandom, LargeAndStridedTensors) {
  TITAN_REQUIRE_CUDA();
  for (Kind kind : {Kind::uniform, Kind::normal}) {
    SCOPED_TRACE(name(kind));
    Generator host_generator(99), device_generator(99);
    Tensor host = Tensor::empty({(1 << 26) + 5}, DType::f32);
    Tensor device = Tensor::empty({(1 << 26) + 5}, DType::f32, Device::cuda());
    draw(host, kind, host_generator);
    draw(device, kind, device_generator);
    EXPECT_TRUE(same_bits(device, host, allowed_differing(kind, host.numel())));
    Tensor host_matrix = Tensor::zeros({300, 301}, DType::bf16);
    Tensor device_matrix = Tensor::zeros({300, 301}, DType::bf16, Device::cuda());
    draw(host_matrix.transpose(0, 1).slice(0, 1, 300), kind, host_generator);
    draw(device_matrix.transpose(0, 1).slice(0, 1, 300), kind, device_generator);
    EXPECT_TRUE(same_bits(device_matrix, host_matrix, allowed_differing(kind, host_matrix.numel())));
  }
}

// A parameter's shard drawn by name on the GPU (a stream, a box of the whole)
// against the CPU's draw of the same shard, for every distribution.
TEST(CudaRandom, ShardsDrawnByNameEqualTheCpu) {
  TITAN_REQUIRE_CUDA();
  for (const ops::Distribution distribution :
       {ops::Distribution::uniform, ops::Distribution::normal, ops::Distribution::truncated_normal}) {
    ops::RandomSpec spec;
    spec.distribution = distribution;
    spec.a = 0.0;
    spec.b = 0.02;
    spec.low = -0.04;
    spec.high = 0.04;
    spec.seed = 7;
    spec.stream = 0x9e3779b97f4a7c15ULL;
    spec.box.dims = 3;
    const int64_t whole[3] = {8, 515, 129}, shape[3] = {4, 257, 64}, offsets[3] = {4, 3, 65};
    for (int d = 0; d < 3; ++d) {
      spec.box.whole[d] = whole[d];
      spec.box.shape[d] = shape[d];
      spec.box.offsets[d] = offsets[d];
    }
    for (DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(static_cast<int>(distribution)));
      Tensor host = Tensor::empty({4, 257, 64}, dtype);
      Tensor device = Tensor::empty({4, 257, 64}, dtype, Device::cuda());
      ops::fill_random(host, spec);
      ops::fill_random(device, spec);
      const Kind kind = distribution == ops::Distribution::uniform  ? Kind::uniform
                        : distribution == ops::Distribution::normal ? Kind::normal
                                                                    : Kind::truncated;
      EXPECT_TRUE(same_bits(device, host, allowed_differing(kind, host.numel())));
    }
  }
}

}  // namespace random_test
}  // namespace titan::testing
