// The Philox generator against the Random123 known-answer vectors, and the
// distributions it feeds: statistics, bounds, and independence from threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <utility>
#include <vector>

#include "titan/core/philox.h"
#include "titan/core/random_math.h"
#include "titan/ops/random.h"

namespace titan {
namespace random_test {

// Known-answer tests from Random123 (kat_vectors, philox4x32 10 rounds).
TEST(Philox, KnownAnswers) {
  Philox4x32 zero = philox4x32_10(0, 0, 0);
  EXPECT_EQ(zero.x[0], 0x6627e8d5u);
  EXPECT_EQ(zero.x[1], 0xe169c58du);
  EXPECT_EQ(zero.x[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.x[3], 0x9b00dbd8u);
  Philox4x32 ones = philox4x32_10(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(ones.x[0], 0x408f276du);
  EXPECT_EQ(ones.x[1], 0x41c83b0eu);
  EXPECT_EQ(ones.x[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.x[3], 0x6d5451fdu);
  // counter (243f6a88, 85a308d3, 13198a2e, 03707344), key (a4093822, 299f31d0)
  Philox4x32 pi = philox4x32_10(0x85a308d3243f6a88ull, 0x0370734413198a2eull, 0x299f31d0a4093822ull);
  EXPECT_EQ(pi.x[0], 0xd16cfe09u);
  EXPECT_EQ(pi.x[1], 0x94fdccebu);
  EXPECT_EQ(pi.x[2], 0x5001e420u);
  EXPECT_EQ(pi.x[3], 0x24126ea1u);
}

TEST(RandomMath, NormalQuantileInvertsCdf) {
  for (double p : {1e-12, 1e-6, 0.01, 0.02425, 0.3, 0.5, 0.77, 0.99, 1 - 1e-9}) {
    EXPECT_NEAR(normal_cdf(normal_quantile(p)), p, 1e-12 * std::max(1.0, p / 1e-3)) << p;
  }
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-12);
}

struct Moments {
  double mean = 0, std = 0, min = 1e30, max = -1e30;
};

Moments moments(const Tensor& t) {
  Moments m;
  const std::vector<float> values = t.to_floats();
  for (float v : values) {
    m.mean += v;
    m.min = std::min<double>(m.min, v);
    m.max = std::max<double>(m.max, v);
  }
  m.mean /= static_cast<double>(values.size());
  for (float v : values) m.std += (v - m.mean) * (v - m.mean);
  m.std = std::sqrt(m.std / static_cast<double>(values.size()));
  return m;
}

// With n = 2^20 samples the standard error of the mean is std / 1024, so 5 sigma is ~0.005 std.
TEST(Random, NormalMoments) {
  Generator generator(7);
  Tensor t = Tensor::empty({1 << 20});
  ops::normal_(t, 2.0, 3.0, generator);
  const Moments m = moments(t);
  EXPECT_NEAR(m.mean, 2.0, 5 * 3.0 / 1024);
  EXPECT_NEAR(m.std, 3.0, 0.01);
}

TEST(Random, UniformBounds) {
  Generator generator(8);
  Tensor t = Tensor::empty({1 << 18});
  ops::uniform_(t, -1.0, 3.0, generator);
  const Moments m = moments(t);
  EXPECT_GE(m.min, -1.0);
  EXPECT_LT(m.max, 3.0);
  EXPECT_NEAR(m.mean, 1.0, 5 * (4.0 / std::sqrt(12.0)) / 512);
}

// Truncated to [-2s, 2s]: variance of a standard normal truncated at +-2 is 0.7737413.
TEST(Random, TruncatedNormalBoundsAndVariance) {
  Generator generator(9);
  Tensor t = Tensor::empty({1 << 20});
  ops::trunc_normal_(t, 0.0, 0.5, -1.0, 1.0, generator);
  const Moments m = moments(t);
  EXPECT_GE(m.min, -1.0);
  EXPECT_LE(m.max, 1.0);
  EXPECT_NEAR(m.std, 0.5 * std::sqrt(0.7737413), 0.002);
  EXPECT_NEAR(m.mean, 0.0, 0.002);
}

TEST(Random, SameValuesForAnyThreadCount) {
  const int threads = omp_get_max_threads();
  Tensor one = Tensor::empty({100003}), many = Tensor::empty({100003});
  Generator g1(11), g2(11);
  omp_set_num_threads(1);
  ops::normal_(one, 0.0, 1.0, g1);
  omp_set_num_threads(std::max(threads, 2));
  ops::normal_(many, 0.0, 1.0, g2);
  omp_set_num_threads(threads);
  EXPECT_EQ(one.to_floats(), many.to_floats());
  EXPECT_EQ(g1.offset(), g2.offset());
  // Element i matches the host reference formula too.
  ops::RandomSpec spec;
  spec.distribution = ops::Distribution::normal;
  spec.seed = 11;
  EXPECT_EQ(one.to_floats()[12345], static_cast<float>(ops::random_value(spec, 12345)));
}

TEST(Random, GeneratorAdvancesAndRestores) {
  Generator generator(5);
  Tensor a = Tensor::empty({10}), b = Tensor::empty({10});
  ops::normal_(a, 0, 1, generator);
  const uint64_t offset = generator.offset();
  EXPECT_EQ(offset, 3u);  // ceil(10 / 4) blocks
  ops::normal_(b, 0, 1, generator);
  EXPECT_NE(a.to_floats(), b.to_floats());
  generator.set_state(5, offset);
  Tensor again = Tensor::empty({10});
  ops::normal_(again, 0, 1, generator);
  EXPECT_EQ(again.to_floats(), b.to_floats());
}

// A box of a tensor (a parameter's shard) filled on its own holds exactly
// the whole fill's values there, for every distribution and any box; another
// stream (another parameter's name) draws other numbers.
TEST(Random, BoxOfAWholeFillEqualsTheWholeFillThere) {
  const Shape whole_shape{4, 6, 5};
  for (const ops::Distribution distribution :
       {ops::Distribution::uniform, ops::Distribution::normal, ops::Distribution::truncated_normal}) {
    ops::RandomSpec spec;
    spec.distribution = distribution;
    spec.a = 0.1;
    spec.b = 0.5;
    spec.low = -0.4;
    spec.high = 0.9;
    spec.seed = 17;
    spec.stream = 0x1234abcdULL;
    Tensor whole = Tensor::empty(whole_shape);
    ops::fill_random(whole, spec);
    for (const auto& [shape, offsets] : std::vector<std::pair<Shape, Shape>>{
             {{2, 3, 5}, {1, 2, 0}}, {{4, 6, 2}, {0, 0, 3}}, {{1, 1, 1}, {3, 5, 4}}, {{4, 6, 5}, {0, 0, 0}}}) {
      ops::RandomSpec boxed = spec;
      boxed.box.dims = 3;
      for (int d = 0; d < 3; ++d) {
        boxed.box.shape[d] = shape[static_cast<size_t>(d)];
        boxed.box.whole[d] = whole_shape[static_cast<size_t>(d)];
        boxed.box.offsets[d] = offsets[static_cast<size_t>(d)];
      }
      Tensor part = Tensor::empty(shape);
      ops::fill_random(part, boxed);
      Tensor expected = whole;
      for (int64_t d = 0; d < 3; ++d) {
        expected = expected.narrow(d, offsets[static_cast<size_t>(d)], shape[static_cast<size_t>(d)]);
      }
      EXPECT_EQ(part.to_floats(), expected.contiguous().to_floats())
          << shape_str(shape) << " at " << shape_str(offsets);
    }
    ops::RandomSpec other = spec;
    other.stream += 1;
    Tensor elsewhere = Tensor::empty(whole_shape);
    ops::fill_random(elsewhere, other);
    EXPECT_NE(elsewhere.to_floats(), whole.to_floats());
  }
}

TEST(Random, RejectsABoxThatDoesNotFit) {
  ops::RandomSpec spec;
  spec.box.dims = 2;
  spec.box.shape[0] = 2, spec.box.shape[1] = 3;
  spec.box.whole[0] = 4, spec.box.whole[1] = 3;
  spec.box.offsets[0] = 3, spec.box.offsets[1] = 0;  // rows 3..4 of 4
  EXPECT_THROW(ops::fill_random(Tensor::empty({2, 3}), spec), Error);
  spec.box.offsets[0] = 2;
  EXPECT_NO_THROW(ops::fill_random(Tensor::empty({2, 3}), spec));
  EXPECT_THROW(ops::fill_random(Tensor::empty({3, 2}), spec), Error);  // the tensor is not the box
}

TEST(Random, RejectsIntegerTensors) {
  Generator generator(1);
  Tensor ids = Tensor::empty({4}, DType::i64);
  EXPECT_THROW(ops::normal_(ids, 0, 1, generator), Error);
}

}  // namespace random_test
}  // namespace titan
