// Float8 training's casts and scaled GEMMs (ops/float8.h, F::float8_linear):
//  - the scalar casts (core/dtype.h) against the OCP FP8 definition written
//    here from the bit fields, on every value, every midpoint and the
//    boundaries, bitwise;
//  - the cast kernel against those scalar casts on the same values;
//  - every granularity's cast and every recipe's Linear, forward and both
//    gradients, against tests/reference/float8_reference.py (float64, the
//    rounding written there), in f32 and bf16.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "support/float8_linear_twins.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/nn/float8_recipe.h"
#include "titan/nn/functional.h"
#include "titan/ops/float8.h"

namespace titan {
namespace float8_test {

using ops::Float8Cast;
using ops::Float8Format;
using ops::Float8Scaling;
using testing::ReferenceCase;

// ---- the OCP 8-bit floating point specification (v1.0), from its tables ----

struct Spec {
  int exponent_bits, mantissa_bits, bias;
  bool e4m3;  // no infinities; S.1111.111 is the only NaN
};
constexpr Spec kE4M3{4, 3, 7, true};
constexpr Spec kE5M2{5, 2, 15, false};

// The value a code stands for (NaN and inf included), from the sign, exponent and mantissa fields.
double spec_value(const Spec& s, uint32_t code) {
  const bool negative = (code >> 7) & 1u;
  const uint32_t exponent = (code >> s.mantissa_bits) & ((1u << s.exponent_bits) - 1);
  const uint32_t mantissa = code & ((1u << s.mantissa_bits) - 1);
  const uint32_t all_ones = (1u << s.exponent_bits) - 1;
  double magnitude;
  if (s.e4m3 && exponent == all_ones && mantissa == 7) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (!s.e4m3 && exponent == all_ones) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - s.bias - s.mantissa_bits);
  } else {
    magnitude = std::ldexp(1.0 + std::ldexp(static_cast<double>(mantissa), -s.mantissa_bits),
                           static_cast<int>(exponent) - s.bias);
  }
  return negative ? -magnitude : magnitude;
}

// The code v rounds to: the nearest finite value, ties to the even code
// (mantissa LSB 0). Beyond the largest finite value e4m3 saturates (titan's
// conversion is OCP's saturating mode for e4m3) and e5m2 overflows to inf
// once v reaches the midpoint between max and the next power, as IEEE's.
uint32_t spec_encode(const Spec& s, float v) {
  const uint32_t sign = std::signbit(v) ? 0x80u : 0u;
  if (std::isnan(v)) return ~0u;  // any NaN code
  const double magnitude = std::fabs(static_cast<double>(v));
  uint32_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  double max_finite = 0.0;
  for (uint32_t code = 0; code < 0x80u; ++code) {
    const double value = spec_value(s, code);
    if (!std::isfinite(value)) continue;
    max_finite = std::max(max_finite, value);
    const double distance = std::fabs(value - magnitude);
    if (distance < best_distance || (distance == best_distance && (code & 1u) == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  if (!s.e4m3) {
    const double next_power = 2.0 * std::ldexp(1.0, static_cast<int>(std::floor(std::log2(max_finite))));
    if (magnitude >= (max_finite + next_power) / 2.0) return sign | 0x7Cu;  // inf
  }
  return sign | best;
}

// Every finite value of the format, both signs, each midpoint between
// neighbours and one f32 step either side of it, the range's edges and beyond,
// zeros, infinities, NaN, and random f32 values over the whole range.
std::vector<float> boundary_inputs(const Spec& s) {
  std::vector<double> magnitudes;
  for (uint32_t code = 0; code < 0x80u; ++code) {
    const double value = spec_value(s, code);
    if (std::isfinite(value)) magnitudes.push_back(value);
  }
  std::sort(magnitudes.begin(), magnitudes.end());
  std::vector<float> inputs;
  const auto add_around = [&](double value) {
    const auto f = static_cast<float>(value);
    for (const float x : {f, std::nextafter(f, 0.0f), std::nextafter(f, std::numeric_limits<float>::infinity())}) {
      inputs.push_back(x);
      inputs.push_back(-x);
    }
  };
  for (size_t i = 0; i < magnitudes.size(); ++i) {
    add_around(magnitudes[i]);
    if (i + 1 < magnitudes.size()) add_around((magnitudes[i] + magnitudes[i + 1]) / 2.0);
  }
  const double max_finite = magnitudes.back();
  for (const double beyond :
       {max_finite * 1.03, max_finite * 1.0625, max_finite * 1.07, max_finite * 1.25, max_finite * 4.0, 1e30}) {
    add_around(beyond);
  }
  add_around(magnitudes[1] / 2.0);  // half the smallest subnormal: a tie, to zero (even)
  add_around(magnitudes[1] / 4.0);
  inputs.push_back(std::numeric_limits<float>::infinity());
  inputs.push_back(-std::numeric_limits<float>::infinity());
  inputs.push_back(std::numeric_limits<float>::quiet_NaN());
  inputs.push_back(std::numeric_limits<float>::denorm_min());
  std::mt19937 engine(7);
  std::uniform_real_distribution<float> exponent(-24.0f, 18.0f), mantissa(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) inputs.push_back(std::ldexp(mantissa(engine), static_cast<int>(exponent(engine))));
  return inputs;
}

TEST(Float8Spec, ScalarCastsMatchTheOcpDefinitionOnEveryValueAndBoundary) {
  for (const bool e4m3 : {true, false}) {
    SCOPED_TRACE(e4m3 ? "e4m3" : "e5m2");
    const Spec& s = e4m3 ? kE4M3 : kE5M2;
    const auto decode = e4m3 ? f8e4m3_to_float : f8e5m2_to_float;
    const auto encode = e4m3 ? float_to_f8e4m3 : float_to_f8e5m2;
    for (uint32_t code = 0; code < 256; ++code) {
      const double expected = spec_value(s, code);
      const float actual = decode(static_cast<uint8_t>(code));
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(actual)) << code;
      } else {
        EXPECT_EQ(static_cast<double>(actual), expected) << code;
        EXPECT_EQ(std::signbit(actual), (code & 0x80u) != 0) << code;
      }
    }
    int checked = 0;
    for (const float v : boundary_inputs(s)) {
      const uint32_t expected = spec_encode(s, v);
      const uint8_t actual = encode(v);
      if (expected == ~0u) {
        EXPECT_TRUE(std::isnan(decode(actual))) << v;
      } else if (std::isinf(v) && s.e4m3) {
        EXPECT_EQ(actual, (std::signbit(v) ? 0x80u : 0u) | 0x7Eu) << v;  // saturating mode: inf -> max
      } else {
        ASSERT_EQ(actual, expected) << std::hexfloat << v;
      }
      ++checked;
    }
    EXPECT_GT(checked, 20000);
  }
}

// The cast kernel rounds as the scalar cast does: a tensor whose amax is the
// format's max has scale exactly 1, so its values are the plain casts.
TEST(Float8Cast, KernelRoundsAsTheScalarCastOnEveryValueAndBoundary) {
  for (const Float8Format format : {Float8Format::e4m3, Float8Format::e5m2}) {
    SCOPED_TRACE(ops::float8_format_name(format));
    const bool e4m3 = format == Float8Format::e4m3;
    std::vector<float> inputs;
    for (const float v : boundary_inputs(e4m3 ? kE4M3 : kE5M2)) {
      if (std::isfinite(v) && std::fabs(v) <= ops::float8_max(format)) inputs.push_back(v);
    }
    inputs.push_back(ops::float8_max(format));
    const auto n = static_cast<int64_t>(inputs.size());
    const ops::Float8Operand cast =
        ops::float8_cast(Tensor::from_floats(inputs, {1, n}), Float8Cast{Float8Scaling::tensorwise, format, false}, 1);
    ASSERT_EQ(cast.scale.to_floats(), std::vector<float>{1.0f});
    const std::vector<float> values = cast.values.to_floats();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const float expected =
          e4m3 ? f8e4m3_to_float(float_to_f8e4m3(inputs[i])) : f8e5m2_to_float(float_to_f8e5m2(inputs[i]));
      ASSERT_EQ(std::bit_cast<uint32_t>(values[i]), std::bit_cast<uint32_t>(expected)) << std::hexfloat << inputs[i];
    }
  }
}

class Float8CastReference : public ::testing::TestWithParam<DType> {};

// Values and scales equal the reference's exactly: both compute x * scale
// in f32 and round it onto the same grid.
TEST_P(Float8CastReference, EveryGranularityMatchesBitwise) {
  for (const char* name : {"tensorwise_e4m3", "tensorwise_e5m2", "rowwise_pow2_e4m3", "rowwise_e5m2", "mx_e4m3",
                           "mx_e5m2", "mx_rceil_e4m3", "mx_rceil_e5m2"}) {
    SCOPED_TRACE(name);
    ReferenceCase ref(std::string("float8_cast_") + name);
    const std::string scaling = ref.meta("scaling");
    const Float8Cast cast{
        scaling == "tensorwise" ? Float8Scaling::tensorwise
                                : (scaling == "axiswise" ? Float8Scaling::axiswise : Float8Scaling::mx_block),
        ref.meta("format") == "e4m3" ? Float8Format::e4m3 : Float8Format::e5m2, ref.meta("power_of_two") == "true",
        ref.meta("rounding") == "rceil" ? ops::MxScaleRounding::rceil : ops::MxScaleRounding::floor};
    const Tensor x = ref.get("x", GetParam());
    for (const int64_t axis : {0, 1}) {
      SCOPED_TRACE(axis);
      const ops::Float8Operand result = ops::float8_cast(x, cast, axis);
      EXPECT_EQ(result.values.to_floats(), ref.get("values_axis" + std::to_string(axis)).to_floats());
      if (cast.scaling != Float8Scaling::mx_block) {
        EXPECT_EQ(result.scale.to_floats(), ref.get("scale_axis" + std::to_string(axis)).to_floats());
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, Float8CastReference, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

struct LinearCase {
  std::string recipe;
  DType dtype;
};

void PrintTo(const LinearCase& c, std::ostream* out) { *out << c.recipe << " " << dtype_name(c.dtype); }

class Float8LinearReference : public ::testing::TestWithParam<LinearCase> {};

// Forward and both gradients. The casts match bitwise (above), so what is
// left is the GEMMs' f32 accumulation (K <= 96 terms: relative 1e-5 of the
// output's scale is generous) and, in bf16, the one rounding of each output.
TEST_P(Float8LinearReference, ForwardAndGradientsMatch) {
  const LinearCase& c = GetParam();
  ReferenceCase ref("float8_linear_" + c.recipe);
  const nn::Float8LinearRecipe recipe = nn::float8_linear_recipe(c.recipe);
  Tensor x = ref.get("x", c.dtype), w = ref.get("w", c.dtype);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  const Tensor y = F::float8_linear(x, w, Tensor(), recipe);
  autograd::backward({y}, {ref.get("grad_y", c.dtype)});
  const auto check = [&](const char* what, const Tensor& actual, const Tensor& expected) {
    SCOPED_TRACE(what);
    ASSERT_TRUE(actual.defined());
    EXPECT_EQ(actual.dtype(), c.dtype);
    const double scale = testing::max_abs(expected);
    if (c.dtype == DType::f32) {
      EXPECT_TRUE(testing::all_close(actual, expected, 1e-5 * scale, 1e-5));
    } else {
      EXPECT_TRUE(testing::all_close(actual, expected, 1e-3 * scale, 1.0 / 128));
    }
  };
  check("y", y, ref.get("y"));
  check("grad_x", x.grad(), ref.get("grad_x"));
  check("grad_w", w.grad(), ref.get("grad_w"));
}

// The same Linear in high precision differs: the recipes do quantise.
TEST(Float8Linear, DiffersFromTheHighPrecisionLinear) {
  ReferenceCase ref("float8_linear_tensorwise");
  const Tensor x = ref.get("x"), w = ref.get("w");
  const Tensor exact = F::linear(x, w);
  const Tensor fp8 = F::float8_linear(x, w, Tensor(), nn::float8_linear_recipe("tensorwise"));
  const double error = testing::relative_l2_error(fp8, exact);
  EXPECT_GT(error, 1e-3);  // e4m3 keeps 3 mantissa bits: a few percent
  EXPECT_LT(error, 0.1);
}

std::vector<LinearCase> linear_cases() {
  std::vector<LinearCase> cases;
  for (const char* recipe : {"tensorwise", "rowwise", "rowwise_with_gw_hp", "mxfp8"}) {
    for (const DType dtype : {DType::f32, DType::bf16}) cases.push_back({recipe, dtype});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Recipes, Float8LinearReference, ::testing::ValuesIn(linear_cases()),
                         [](const auto& info) { return info.param.recipe + "_" + dtype_name(info.param.dtype); });

TEST(Float8Cast, MxNeedsTheReducedDimInBlocksOf32) {
  const Tensor x = Tensor::zeros({48, 64}, DType::f32);
  const Float8Cast mx{Float8Scaling::mx_block, Float8Format::e4m3, false};
  EXPECT_NO_THROW(ops::float8_cast(x, mx, 1));
  testing::expect_error([&] { ops::float8_cast(x, mx, 0); },
                        {"MXFP8 needs the reduced dim divisible by 32", "[48, 64]"});
}

// The MX Linear checks its token count up front, naming the key that can skip the layer.
TEST(Float8Linear, MxNamesTheLayerWhoseTokensItsBlocksDoNotDivide) {
  const nn::Float8LinearRecipe mx = nn::float8_linear_recipe("mxfp8");
  Tensor w = testing::random_cpu({32, 64}, DType::f32, 9);
  EXPECT_NO_THROW(F::float8_linear(testing::random_cpu({48, 64}, DType::f32, 8), w, Tensor(), mx));  // no gradient
  w.set_requires_grad(true);
  testing::expect_error(
      [&] {
        F::float8_linear(testing::random_cpu({48, 64}, DType::f32, 8), w, Tensor(), mx);
      },
      {"a Linear reduces its weight gradient over 48 tokens", "quantize.linear.mx.filter_fqns"});
  EXPECT_NO_THROW(F::float8_linear(testing::random_cpu({64, 64}, DType::f32, 8), w, Tensor(), mx));
}

TEST(Float8Cast, NanPropagatesAndZerosStayZero) {
  std::vector<float> values(64, 1.0f);
  values[3] = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::from_floats(values, {2, 32});
  for (const Float8Scaling scaling : {Float8Scaling::tensorwise, Float8Scaling::axiswise, Float8Scaling::mx_block}) {
    const std::vector<float> out =
        ops::float8_cast(x, Float8Cast{scaling, Float8Format::e4m3, false}, 1).values.to_floats();
    EXPECT_TRUE(std::isnan(out[3]));
    // The other row has its own scale (axiswise, MX) and stays finite there.
    EXPECT_EQ(std::isnan(out[40]), scaling == Float8Scaling::tensorwise);
  }
  const ops::Float8Operand zeros = ops::float8_cast(Tensor::zeros({1, 32}, DType::f32),
                                                    Float8Cast{Float8Scaling::mx_block, Float8Format::e4m3, false}, 1);
  EXPECT_EQ(zeros.values.to_floats(), std::vector<float>(32, 0.0f));
  EXPECT_EQ(zeros.scale.to_ints(), std::vector<int64_t>{0});  // e8m0 2^-127, the clamp's floor
}

TEST(Float8Recipe, UnknownNamesListTheKnownOnes) {
  testing::expect_error([] { nn::float8_linear_recipe("rowwize"); },
                        {"'rowwize'", "tensorwise, rowwise, rowwise_with_gw_hp"});
  EXPECT_EQ(nn::float8_linear_recipe("").name, "tensorwise");
  EXPECT_TRUE(nn::float8_linear_recipe("mxfp8_cublas").uses_mx_blocks());
  EXPECT_FALSE(nn::float8_linear_recipe("rowwise").uses_mx_blocks());
}

// ---- FSDP's float8 all-gather: shards cast with the whole weight's scale ----

// The shards' amaxes, their max turned into one scale, each shard encoded and
// the codes decoded: the whole weight's tensorwise cast, bit for bit (the
// cast itself is checked against the reference above). Uneven shards, an
// empty one, values over 2^24 in magnitude.
TEST(Float8Gather, ShardsEncodedWithTheWholeScaleDecodeToTheTensorwiseCast) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<float> values(40 * 72);
    std::mt19937 engine(11);
    std::uniform_real_distribution<float> exponent(-14.0f, 10.0f), mantissa(-2.0f, 2.0f);
    for (float& v : values) v = std::ldexp(mantissa(engine), static_cast<int>(exponent(engine)));
    values[5] = 0.0f;
    const Tensor whole = Tensor::from_floats(values, {40, 72}).to(dtype);
    const ops::Float8Operand expected = ops::float8_cast(whole, Float8Cast{}, 1);
    const std::vector<std::pair<int64_t, int64_t>> row_ranges{{0, 17}, {17, 17}, {17, 40}};
    std::vector<Tensor> shards;
    for (const auto& [begin, end] : row_ranges) shards.push_back(whole.narrow(0, begin, end - begin).contiguous());
    const Tensor amaxes = ops::float8_amaxes(shards);
    EXPECT_EQ(amaxes.to_floats()[1], 0.0f);
    const std::vector<float> per_shard = amaxes.to_floats();
    const float amax = *std::max_element(per_shard.begin(), per_shard.end());
    const Tensor scales =
        ops::float8_scales_from_amaxes(Tensor::from_floats(std::vector<float>{amax}, {1}), Float8Format::e4m3);
    EXPECT_EQ(scales.to_floats(), expected.scale.to_floats());
    std::vector<float> decoded;
    for (const Tensor& shard : shards) {
      const Tensor codes = Tensor::empty({shard.numel()}, DType::f8e4m3);
      ops::float8_encode(codes, shard.view({-1}), scales, 0);
      const Tensor back = Tensor::empty({shard.numel()}, DType::bf16);
      ops::float8_decode(back, codes);
      for (const float v : back.to_floats()) decoded.push_back(v);
    }
    const std::vector<float> cast = expected.values.to_floats();
    ASSERT_EQ(decoded.size(), cast.size());
    for (size_t i = 0; i < cast.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(decoded[i]), std::bit_cast<uint32_t>(cast[i])) << i;
    }
  }
}

// Every finite code's value, both signs, encodes back to its code at scale 1
// (the encoding is the scalar cast's on the grid), and NaN to the NaN code.
TEST(Float8Gather, EveryValueEncodesToItsCode) {
  for (const DType format : {DType::f8e4m3, DType::f8e5m2}) {
    const Spec& spec = format == DType::f8e4m3 ? kE4M3 : kE5M2;
    std::vector<float> values;
    std::vector<uint8_t> expected;
    for (uint32_t code = 0; code < 256; ++code) {
      const double value = spec_value(spec, code);
      if (std::isinf(value)) continue;  // beyond the grid: the casts saturate
      values.push_back(static_cast<float>(value));
      const uint8_t nan_code = format == DType::f8e4m3 ? float_to_f8e4m3(NAN) : float_to_f8e5m2(NAN);
      expected.push_back(std::isnan(value) ? static_cast<uint8_t>(nan_code | (code & 0x80u))
                                           : static_cast<uint8_t>(code));
    }
    const auto n = static_cast<int64_t>(values.size());
    const Tensor codes = Tensor::empty({n}, format);
    ops::float8_encode(codes, Tensor::from_floats(values, {n}), Tensor::from_floats(std::vector<float>{1.0f}, {1}), 0);
    const auto* got = static_cast<const uint8_t*>(codes.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], expected[static_cast<size_t>(i)]) << dtype_name(format) << " value " << values[i];
    }
  }
}

// Every code of both formats decodes to the OCP value (NaN to NaN), in f32 and bf16.
TEST(Float8Gather, EveryCodeDecodesToItsOcpValue) {
  for (const DType format : {DType::f8e4m3, DType::f8e5m2}) {
    const Spec& spec = format == DType::f8e4m3 ? kE4M3 : kE5M2;
    Tensor codes = Tensor::empty({256}, format);
    for (int code = 0; code < 256; ++code) static_cast<uint8_t*>(codes.data_ptr())[code] = static_cast<uint8_t>(code);
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const Tensor values = Tensor::empty({256}, dtype);
      ops::float8_decode(values, codes);
      const std::vector<float> decoded = values.to_floats();
      for (uint32_t code = 0; code < 256; ++code) {
        const double expected = spec_value(spec, code);
        if (std::isnan(expected)) {
          EXPECT_TRUE(std::isnan(decoded[code])) << code;
        } else {
          EXPECT_EQ(decoded[code], expected) << code;
        }
      }
    }
  }
}

// A weight cast already (F::float8_cast_weight, what FSDP's all-gather hands
// the Linear) gives the Linear the tensorwise recipe's forward and gradients,
// the weight's through the cast to the master.
TEST(Float8Gather, LinearOnAPrecastWeightEqualsCastingItInside) {
  ReferenceCase ref("float8_linear_tensorwise");
  const nn::Float8LinearRecipe recipe = nn::float8_linear_recipe("tensorwise");
  Tensor x1 = ref.get("x"), w1 = ref.get("w"), x2 = x1.detach(), w2 = w1.detach();
  for (Tensor* t : {&x1, &w1, &x2, &w2}) t->set_requires_grad(true);
  const Tensor inside = F::float8_linear(x1, w1, Tensor(), recipe);
  const ops::Float8Operand precast = F::float8_cast_weight(w2, DType::f32);
  const Tensor outside = F::float8_linear(x2, precast.values, Tensor(), recipe, precast.scale);
  EXPECT_EQ(outside.to_floats(), inside.to_floats());
  autograd::backward({inside}, {ref.get("grad_y")});
  autograd::backward({outside}, {ref.get("grad_y")});
  EXPECT_EQ(x2.grad().to_floats(), x1.grad().to_floats());
  EXPECT_EQ(w2.grad().to_floats(), w1.grad().to_floats());
  testing::expect_error(
      [&] { F::float8_linear(x2, precast.values, Tensor(), nn::float8_linear_recipe("rowwise"), precast.scale); },
      {"cast already", "'rowwise'"});
}

// The CUDA kernels (ops/cuda/float8.cu) against the CPU's: casts bit for bit,
// the Linear's outputs and gradients within the GEMMs' f32 accumulation
// order. Skipped without a GPU (counted).
class CudaFloat8 : public ::testing::TestWithParam<DType> {};

TEST_P(CudaFloat8, CastsAndLinearMatchTheCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const Tensor x = testing::random_cpu({96, 64}, dtype, 31, -3.0, 3.0);
  for (const Float8Scaling scaling : {Float8Scaling::tensorwise, Float8Scaling::axiswise, Float8Scaling::mx_block}) {
    for (const Float8Format format : {Float8Format::e4m3, Float8Format::e5m2}) {
      for (const int64_t axis : {0, 1}) {
        SCOPED_TRACE(std::to_string(static_cast<int>(scaling)) + " " + ops::float8_format_name(format) + " axis " +
                     std::to_string(axis));
        const Float8Cast cast{scaling, format, scaling == Float8Scaling::axiswise};
        const ops::Float8Operand cpu = ops::float8_cast(x, cast, axis);
        const ops::Float8Operand gpu = ops::float8_cast(testing::on_cuda(x), cast, axis);
        EXPECT_EQ(testing::on_cpu(gpu.values).to_floats(), cpu.values.to_floats());
        EXPECT_EQ(testing::on_cpu(gpu.scale).to_floats(), cpu.scale.to_floats());
      }
    }
  }
  // The float8 all-gather's steps.
  const Tensor scales = ops::float8_scales_from_amaxes(ops::float8_amaxes(std::vector<Tensor>{x}), Float8Format::e4m3);
  const Tensor gpu_scales =
      ops::float8_scales_from_amaxes(ops::float8_amaxes(std::vector<Tensor>{testing::on_cuda(x)}), Float8Format::e4m3);
  EXPECT_EQ(testing::on_cpu(gpu_scales).to_floats(), scales.to_floats());
  const Tensor codes = Tensor::empty({x.numel()}, DType::f8e4m3), gpu_codes = testing::on_cuda(codes);
  ops::float8_encode(codes, x.view({-1}), scales, 0);
  ops::float8_encode(gpu_codes, testing::on_cuda(x).view({-1}), gpu_scales, 0);
  EXPECT_EQ(testing::on_cpu(gpu_codes).to_floats(), codes.to_floats());
  const Tensor decoded = Tensor::empty({x.numel()}, dtype), gpu_decoded = testing::on_cuda(decoded);
  ops::float8_decode(decoded, codes);
  ops::float8_decode(gpu_decoded, gpu_codes);
  EXPECT_EQ(testing::on_cpu(gpu_decoded).to_floats(), decoded.to_floats());
  for (const char* name : {"tensorwise", "rowwise", "rowwise_with_gw_hp", "mxfp8"}) {
    SCOPED_TRACE(name);
    const nn::Float8LinearRecipe recipe = nn::float8_linear_recipe(name);
    const Tensor w = testing::random_cpu({64, 64}, dtype, 32, -0.1, 0.1), gy = testing::random_cpu({96, 64}, dtype, 33);
    Tensor xc = x.detach(), wc = w.detach(), xg = testing::on_cuda(x), wg = testing::on_cuda(w);
    for (Tensor* t : {&xc, &wc, &xg, &wg}) t->set_requires_grad(true);
    const Tensor yc = F::float8_linear(xc, wc, Tensor(), recipe), yg = F::float8_linear(xg, wg, Tensor(), recipe);
    autograd::backward({yc}, {gy});
    autograd::backward({yg}, {testing::on_cuda(gy)});
    const double tol = dtype == DType::f32 ? 1e-5 : 1.0 / 128;
    EXPECT_TRUE(testing::all_close(testing::on_cpu(yg), yc, tol * testing::max_abs(yc), tol));
    EXPECT_TRUE(testing::all_close(testing::on_cpu(xg.grad()), xc.grad(), tol * testing::max_abs(xc.grad()), tol));
    EXPECT_TRUE(testing::all_close(testing::on_cpu(wg.grad()), wc.grad(), tol * testing::max_abs(wc.grad()), tol));
  }
}

// cuBLASLt's FP8 GEMM against the emulation (the bf16 GEMM of the decoded
// values): tensorwise scales, rowwise (outer-vector) scales, and a rowwise
// gradient beside a tensorwise weight; e4m3 with e4m3 and e5m2 with e4m3;
// then each recipe's Linear with tensor_cores on against off. Both accumulate
// in f32 (fast accumulation off), in different orders: 1e-5 relative.
TEST_P(CudaFloat8, TensorCoreGemmMatchesTheEmulation) {
  TITAN_REQUIRE_CUDA();
  if (!ops::float8_tensor_cores(Device::cuda())) GTEST_SKIP() << "this GPU has no fp8 tensor cores (sm_89+)";
  const DType dtype = GetParam();
  const Tensor x = testing::on_cuda(testing::random_cpu({96, 64}, dtype, 41, -3.0, 3.0));
  const Tensor w = testing::on_cuda(testing::random_cpu({48, 64}, dtype, 42, -0.1, 0.1));
  const Float8Cast tensorwise{}, e5m2{Float8Scaling::tensorwise, Float8Format::e5m2, false};
  const Float8Cast rowwise{Float8Scaling::axiswise, Float8Format::e4m3, true};
  for (const auto& [x_cast, w_cast] : std::vector<std::pair<Float8Cast, Float8Cast>>{
           {tensorwise, tensorwise}, {e5m2, tensorwise}, {rowwise, rowwise}, {rowwise, tensorwise}}) {
    SCOPED_TRACE(std::to_string(static_cast<int>(x_cast.scaling)) + ops::float8_format_name(x_cast.format) + " x " +
                 std::to_string(static_cast<int>(w_cast.scaling)));
    const ops::Float8Operand a = ops::float8_cast(x, x_cast, 1), b = ops::float8_cast(w, w_cast, 1);
    const DType a_codes = ops::float8_dtype(x_cast.format);
    const Tensor emulated = ops::float8_scaled_mm(a.values, a.scale, b.values.transpose(0, 1), b.scale, DType::f32);
    const Tensor fp8 =
        ops::float8_tensor_core_mm(a.values.to(a_codes), a.scale, b.values.to(DType::f8e4m3), b.scale, DType::f32);
    EXPECT_TRUE(testing::all_close(testing::on_cpu(fp8), testing::on_cpu(emulated),
                                   1e-5 * testing::max_abs(testing::on_cpu(emulated)), 1e-5));
  }
  const Tensor gy = testing::on_cuda(testing::random_cpu({96, 48}, dtype, 43));
  for (const char* name : {"tensorwise", "rowwise", "rowwise_with_gw_hp"}) {
    testing::expect_tensor_cores_match_emulation(name, x, w, gy, dtype == DType::f32 ? 1e-5 : 1.0 / 128);
  }
}

// On the CPU the op is the emulation itself; what it checks there is its contract.
TEST(Float8TensorCoreMm, RefusesTwoE5m2OperandsAndAKNotInSixteens) {
  const Tensor one = Tensor::full({1}, 1.0);
  testing::expect_error(
      [&] {
        ops::float8_tensor_core_mm(Tensor::zeros({16, 32}, DType::f8e5m2), one, Tensor::zeros({16, 32}, DType::f8e5m2),
                                   one, DType::f32);
      },
      {"two e5m2 operands"});
  testing::expect_error(
      [&] {
        ops::float8_tensor_core_mm(Tensor::zeros({16, 24}, DType::f8e4m3), one, Tensor::zeros({16, 24}, DType::f8e4m3),
                                   one, DType::f32);
      },
      {"K = 24 is not a multiple of 16"});
  EXPECT_FALSE(ops::float8_tensor_cores(Device::cpu()));
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaFloat8, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace float8_test
}  // namespace titan
