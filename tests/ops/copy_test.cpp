// CUDA copy, fill and transfer against the CPU ones. Conversions are exact
// functions of the input bits, so every comparison here is bitwise: any
// difference at all is a bug (NaN payloads, fp8 saturation and subnormals
// included).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/cuda.h"

namespace titan::testing {
namespace copy_test {

constexpr DType kAllDTypes[] = {DType::f32,    DType::bf16, DType::f16, DType::f8e4m3,
                                DType::f8e5m2, DType::i32,  DType::i64, DType::u8};

// Bitwise equality of a (CUDA or CPU) tensor with a CPU one; names the first
// differing element.
::testing::AssertionResult same_bits(const Tensor& actual, const Tensor& expected) {
  const Tensor a = on_cpu(actual).contiguous(), e = expected.contiguous();
  if (a.dtype() != e.dtype() || a.shape() != e.shape()) {
    return ::testing::AssertionFailure() << dtype_name(a.dtype()) << " " << shape_str(a.shape()) << " vs expected "
                                         << dtype_name(e.dtype()) << " " << shape_str(e.shape());
  }
  const size_t size = a.element_size();
  const auto* pa = static_cast<const unsigned char*>(a.data_ptr());
  const auto* pe = static_cast<const unsigned char*>(e.data_ptr());
  int64_t differing = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * size, pe + i * size, size) != 0) {
      if (first < 0) first = i;
      ++differing;
    }
  }
  if (differing == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differing << " of " << a.numel() << " " << dtype_name(a.dtype())
                                       << " elements differ; first at flat index " << first << ": "
                                       << load_element(a.data_ptr(), a.dtype(), first) << " vs "
                                       << load_element(e.data_ptr(), e.dtype(), first);
}

// Values exercising every conversion path between float formats: specials,
// signed zeros, f32/f16/fp8 subnormals, ties, overflow of each narrow format,
// and ordinary values of several magnitudes.
std::vector<float> float_values(int64_t n) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {0.0f,     -0.0f,    inf,      -inf,         std::nanf(""),  -std::nanf(""),
                               1e-40f,   -3e-42f,  6e-8f,    1e-7f,        2.0f - 1e-7f,   1.0f + 1.0f / 256,
                               65504.0f, 65520.0f, 70000.0f, 448.0f,       464.0f,         1000.0f,
                               57344.0f, 61440.0f, 3.0e38f,  0.001953125f, -0.0009765625f, 1.0f / 3};
  Tensor noise = random_cpu({n}, DType::f32, 11, -4.0, 4.0);
  const std::vector<float> random = noise.to_floats();
  for (size_t i = 0; values.size() < static_cast<size_t>(n); ++i) {
    // Spread over magnitudes 2^-20 .. 2^12.
    values.push_back(random[i] * std::ldexp(1.0f, static_cast<int>(i % 33) - 20));
  }
  values.resize(static_cast<size_t>(n));
  return values;
}

// Values every dtype holds without undefined behaviour on conversion to an
// integer: finite, in [0, 200), some fractional (truncated towards zero).
std::vector<float> integer_safe_values(int64_t n) {
  std::vector<float> values = random_cpu({n}, DType::f32, 12, 0.0, 200.0).to_floats();
  for (size_t i = 0; i < values.size(); i += 2) values[i] = std::floor(values[i]);
  return values;
}

Tensor source_values(DType src, DType dst, const Shape& shape) {
  const int64_t n = shape_numel(shape);
  const bool floats_only = is_floating(src) && is_floating(dst);
  const std::vector<float> values = floats_only ? float_values(n) : integer_safe_values(n);
  return Tensor::from_floats(values, shape, src);
}

TEST(CudaCopy, EveryDtypePairContiguous) {
  TITAN_REQUIRE_CUDA();
  for (DType src : kAllDTypes) {
    for (DType dst : kAllDTypes) {
      SCOPED_TRACE(std::string(dtype_name(src)) + " -> " + dtype_name(dst));
      const Tensor host = source_values(src, dst, {3, 333});
      const Tensor expected = host.to(dst);
      const Tensor device = on_cuda(host);
      EXPECT_TRUE(same_bits(device.to(dst), expected));
    }
  }
}

// Views applied identically to a CPU tensor and its CUDA copy.
struct View {
  const char* name;
  Tensor (*apply)(const Tensor&);
};
const View kSourceViews[] = {
    {"transpose", [](const Tensor& t) { return t.transpose(0, 2); }},
    {"slice with step", [](const Tensor& t) { return t.slice(1, 1, 10, 3).slice(2, 2, 37); }},
    {"permute",
     [](const Tensor& t) {
       return t.permute({2, 0, 1});
     }},
    {"expand",
     [](const Tensor& t) {
       return t.slice(1, 0, 1).expand({6, 5, 37});
     }},
    {"select", [](const Tensor& t) { return t.select(2, 3); }},
    {"scalar", [](const Tensor& t) { return t.select(0, 1).select(0, 2).select(0, 3); }},
};

TEST(CudaCopy, StridedSourcesIntoContiguousDestinations) {
  TITAN_REQUIRE_CUDA();
  const std::pair<DType, DType> pairs[] = {
      {DType::f32, DType::f32}, {DType::bf16, DType::bf16}, {DType::f32, DType::bf16}, {DType::bf16, DType::f32},
      {DType::i64, DType::i64}, {DType::f32, DType::f16},   {DType::i32, DType::f32},  {DType::u8, DType::u8}};
  for (const auto& [src, dst] : pairs) {
    const Tensor host = source_values(src, dst, {6, 11, 37});
    const Tensor device = on_cuda(host);
    for (const View& view : kSourceViews) {
      SCOPED_TRACE(std::string(dtype_name(src)) + " -> " + dtype_name(dst) + ", " + view.name);
      const Tensor expected = view.apply(host).contiguous().to(dst);
      Tensor actual = Tensor::empty(view.apply(host).shape(), dst, Device::cuda());
      titan::copy_(actual, view.apply(device));
      EXPECT_TRUE(same_bits(actual, expected));
    }
  }
}

// Writes through a strided destination view must touch exactly the view's
// elements: the whole destination buffer is compared, not just the view.
TEST(CudaCopy, StridedDestinations) {
  TITAN_REQUIRE_CUDA();
  for (DType dtype : {DType::f32, DType::bf16, DType::i32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor values = source_values(DType::f32, dtype, {11, 6, 37}).to(DType::f32);
    Tensor host_dst = Tensor::full({6, 11, 40}, 7.0, dtype);
    Tensor device_dst = on_cuda(host_dst);
    const auto view = [](const Tensor& t) { return t.slice(2, 1, 38).transpose(0, 1); };  // [11, 6, 37]
    titan::copy_(view(host_dst), values);
    titan::copy_(view(device_dst), on_cuda(values));
    EXPECT_TRUE(same_bits(device_dst, host_dst));
    // Both sides strided: a transposed source into a sliced destination.
    const auto source_view = [](const Tensor& t) { return t.transpose(0, 2).slice(0, 0, 11).slice(1, 0, 6); };
    const Tensor wide = source_values(DType::f32, dtype, {37, 7, 12}).to(dtype);
    titan::copy_(view(host_dst), source_view(wide));
    titan::copy_(view(device_dst), source_view(on_cuda(wide)));
    EXPECT_TRUE(same_bits(device_dst, host_dst));
  }
}

// Seven dims that cannot merge (every other dim sliced), then copies of more
// elements than one grid's threads (65535 blocks of 256), so the grid-stride
// loops wrap.
TEST(CudaCopy, ManyDimsAndLargeTensors) {
  TITAN_REQUIRE_CUDA();
  const Tensor host = source_values(DType::f32, DType::bf16, {3, 4, 3, 4, 3, 4, 5});
  const Tensor device = on_cuda(host);
  const auto view = [](const Tensor& t) {
    return t.slice(1, 0, 3).slice(3, 1, 4).slice(5, 0, 3).permute({6, 5, 4, 3, 2, 1, 0});
  };
  EXPECT_TRUE(same_bits(view(device).to(DType::bf16).contiguous(), view(host).to(DType::bf16).contiguous()));

  const Tensor big = random_cpu({4099, 8209}, DType::f32, 21);
  const Tensor expected = big.transpose(0, 1).contiguous();
  EXPECT_TRUE(same_bits(on_cuda(big).transpose(0, 1).contiguous(), expected));
  EXPECT_TRUE(same_bits(on_cuda(big).to(DType::bf16), big.to(DType::bf16)));
}

TEST(CudaCopy, EmptyTensors) {
  TITAN_REQUIRE_CUDA();
  const Tensor empty = Tensor::empty({0, 5}, DType::f32, Device::cuda());
  EXPECT_EQ(empty.to(DType::bf16).numel(), 0);
  EXPECT_EQ(on_cpu(empty).numel(), 0);
  EXPECT_EQ(empty.transpose(0, 1).contiguous().numel(), 0);
}

TEST(CudaFill, EveryDtypeContiguousAndStrided) {
  TITAN_REQUIRE_CUDA();
  for (DType dtype : kAllDTypes) {
    for (double value : {0.0, 2.5, 100.0, 1.0 / 3}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + std::to_string(value));
      EXPECT_TRUE(same_bits(Tensor::full({1001}, value, dtype, Device::cuda()), Tensor::full({1001}, value, dtype)));
      // A strided fill leaves everything outside the view alone.
      Tensor host = Tensor::full({7, 9, 13}, 3.0, dtype);
      Tensor device = on_cuda(host);
      titan::fill_(host.slice(2, 1, 12, 2).transpose(0, 1), value);
      titan::fill_(device.slice(2, 1, 12, 2).transpose(0, 1), value);
      EXPECT_TRUE(same_bits(device, host));
    }
  }
}

TEST(CudaTransfer, RoundTripsEveryDtypeAndLayout) {
  TITAN_REQUIRE_CUDA();
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor host = source_values(dtype, dtype, {(1 << 18) + 3});
    EXPECT_TRUE(same_bits(on_cpu(on_cuda(host)), host));
    // Non-contiguous on either side goes through a staged contiguous copy.
    const Tensor matrix = host.slice(0, 0, 511 * 513).view({511, 513});
    EXPECT_TRUE(same_bits(on_cuda(matrix.transpose(0, 1)), matrix.transpose(0, 1).contiguous()));
    EXPECT_TRUE(same_bits(on_cpu(on_cuda(matrix).transpose(0, 1)), matrix.transpose(0, 1).contiguous()));
  }
}

// The transfer must have finished when it returns: results read straight
// after kernels queued on the stream, and a host buffer freed straight after
// an upload, must both be complete.
TEST(CudaTransfer, IsCompleteWhenItReturns) {
  TITAN_REQUIRE_CUDA();
  for (int round = 0; round < 5; ++round) {
    Tensor device;
    {
      std::vector<float> values(1 << 20, static_cast<float>(round));
      const Tensor host = Tensor::from_blob(values.data(), {1 << 20}, DType::f32, Device::cpu());
      device = on_cuda(host);
    }  // `values` is freed here
    titan::fill_(device.slice(0, 0, 1 << 19), -1.0);
    const std::vector<float> back = on_cpu(device).to_floats();
    EXPECT_EQ(back.front(), -1.0f);
    EXPECT_EQ(back[(1 << 19) - 1], -1.0f);
    EXPECT_EQ(back[1 << 19], static_cast<float>(round));
    EXPECT_EQ(back.back(), static_cast<float>(round));
  }
}

}  // namespace copy_test
}  // namespace titan::testing
