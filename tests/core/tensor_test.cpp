// Tensor views, metadata, copies and the allocator's statistics.
#include <gtest/gtest.h>

#include "support/expect_error.h"
#include "titan/core/allocator.h"
#include "titan/core/tensor.h"

namespace titan {
namespace tensor_test {

Tensor iota(const Shape& shape) {
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  return Tensor::from_floats(values, shape);
}

TEST(Tensor, ContiguousMetadata) {
  Tensor t = Tensor::empty({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_THROW(t.size(3), Error);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % CpuAllocator::kAlignment, 0u);
}

TEST(Tensor, TransposeAndContiguous) {
  Tensor t = iota({2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.to_floats(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_floats(), tt.to_floats());
  EXPECT_THROW(tt.view({6}), Error);
  EXPECT_EQ(tt.reshape({6}).to_floats(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Tensor, SliceNarrowSelect) {
  Tensor t = iota({4, 5});
  EXPECT_EQ(t.slice(1, 1, 5, 2).to_floats(), (std::vector<float>{1, 3, 6, 8, 11, 13, 16, 18}));
  EXPECT_EQ(t.narrow(0, 2, 1).to_floats(), (std::vector<float>{10, 11, 12, 13, 14}));
  EXPECT_EQ(t.select(1, -1).to_floats(), (std::vector<float>{4, 9, 14, 19}));
  EXPECT_THROW(t.narrow(0, 3, 2), Error);
  // Views share storage: writing through one is visible in the other.
  t.narrow(0, 0, 1).data<float>()[0] = 42.0f;
  EXPECT_EQ(t.to_floats()[0], 42.0f);
}

TEST(Tensor, ViewInferAndExpand) {
  Tensor t = iota({2, 6});
  EXPECT_EQ(t.view({3, -1}).shape(), (Shape{3, 4}));
  EXPECT_THROW(t.view({5, -1}), Error);
  Tensor row = iota({1, 3});
  Tensor expanded = row.expand({4, 3});
  EXPECT_EQ(expanded.stride(0), 0);
  EXPECT_EQ(expanded.contiguous().to_floats(), (std::vector<float>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(iota({3}).unsqueeze(0).shape(), (Shape{1, 3}));
  EXPECT_EQ(iota({3, 1}).squeeze(1).shape(), (Shape{3}));
}

TEST(Tensor, CastRoundTrip) {
  Tensor t = Tensor::from_floats(std::vector<float>{1.0f, -2.5f, 3.140625f}, {3});
  Tensor b = t.to(DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(b.to(DType::f32).to_floats(), t.to_floats());
  Tensor ids = Tensor::arange(5, DType::i32);
  EXPECT_EQ(ids.to_ints(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Tensor::full({2}, 7, DType::i64).to_ints(), (std::vector<int64_t>{7, 7}));
}

TEST(Tensor, MetaHoldsNoData) {
  const MemoryStats before = memory_stats(DeviceType::cpu);
  Tensor t = Tensor::empty({1 << 20, 1 << 10}, DType::f32, Device::meta());
  EXPECT_EQ(t.numel(), int64_t{1} << 30);
  EXPECT_EQ(memory_stats(DeviceType::cpu).live_bytes, before.live_bytes);
  EXPECT_THROW(t.data_ptr(), Error);
  EXPECT_EQ(t.transpose(0, 1).shape(), (Shape{1 << 10, 1 << 20}));
}

TEST(Allocator, LiveAndPeakBytes) {
  Allocator& allocator = allocator_for(DeviceType::cpu);
  allocator.reset_peak();
  const int64_t base = allocator.stats().live_bytes;
  {
    Tensor a = Tensor::empty({1000});
    EXPECT_EQ(allocator.stats().live_bytes, base + 4000);
    Tensor b = Tensor::empty({500});
    EXPECT_EQ(allocator.stats().live_bytes, base + 6000);
  }
  EXPECT_EQ(allocator.stats().live_bytes, base);
  EXPECT_GE(allocator.stats().peak_bytes, base + 6000);
}

TEST(Tensor, PrintingElidesLongDims) {
  const std::string text = iota({2, 20}).str();
  EXPECT_NE(text.find("shape=[2, 20]"), std::string::npos);
  EXPECT_NE(text.find("..."), std::string::npos);
  EXPECT_NE(text.find("19"), std::string::npos);
}

TEST(Device, Parse) {
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_THROW(Device::parse("tpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
}

}  // namespace tensor_test
}  // namespace titan

namespace titan {
namespace tensor_test {

// The trainer runs each step's device work under this scope; a host read
// there would make a recorded CUDA graph replay stale values.
TEST(NoHostReadsScope, HostReadsInsideAreErrorsNamingTheTensorAndOutsideAreFine) {
  const Tensor t = Tensor::full({2, 3}, 1.5);
  {
    NoHostReadsScope scope("the test's step");
    testing::expect_error([&] { (void)t.to_floats(); }, {"host read", "[2, 3]", "the test's step"});
    testing::expect_error([&] { (void)t.narrow(0, 0, 1).narrow(1, 0, 1).item(); }, {"host read"});
    testing::expect_error([&] { (void)Tensor::arange(4).to_ints(); }, {"host read", "i64"});
  }
  EXPECT_EQ(t.to_floats()[0], 1.5f);
}

}  // namespace tensor_test
}  // namespace titan
