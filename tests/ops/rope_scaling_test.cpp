// RoPE scaling (every rope_type) and partial rotary against
// tests/reference/rope_scaling.py, float64 written from transformers'
// formulas, and the partial rotation against the float64 PyTorch rotation
// of the first rotary_dim features.
//
// Tolerances: the inverse frequencies are f64 on both sides, computed by the
// same formula in a different order (pow, divisions): 1e-12 relative. The
// attention factor likewise, 1e-14. The f32 tables: titan's angle p * f
// differs from the reference's by < 64 * 1e-12 * f, far below f32's ulp, so
// each entry is the f64 value rounded to f32 on both sides, except where the
// two roundings straddle a boundary: one f32 ulp of the attention factor,
// 1.2e-7 * factor (1.2e-7 * 1.6 < 2e-7 absolute).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "support/cuda.h"
#include "support/reference.h"
#include "titan/ops/rope.h"

namespace titan {
namespace rope_scaling_test {

using testing::expect_matches_reference;
using testing::ReferenceCase;

// The reference case's scaling (rope_scaling.py's dict) as titan's RopeScaling.
ops::RopeScaling scaling_of(const nlohmann::json& s) {
  ops::RopeScaling scaling;
  const std::string type = s.value("type", "default");
  for (ops::RopeScalingType t :
       {ops::RopeScalingType::none, ops::RopeScalingType::linear, ops::RopeScalingType::dynamic,
        ops::RopeScalingType::yarn, ops::RopeScalingType::longrope, ops::RopeScalingType::llama3}) {
    if (type == ops::rope_scaling_type_name(t)) scaling.type = t;
  }
  scaling.factor = s.value("factor", 0.0);
  scaling.original_max_position = s.value("original", int64_t{8192});
  scaling.low_freq_factor = s.value("low_freq_factor", 1.0);
  scaling.high_freq_factor = s.value("high_freq_factor", 4.0);
  scaling.beta_fast = s.value("beta_fast", 32.0);
  scaling.beta_slow = s.value("beta_slow", 1.0);
  scaling.mscale = s.value("mscale", 0.0);
  scaling.mscale_all_dim = s.value("mscale_all_dim", 0.0);
  scaling.truncate = s.value("truncate", true);
  scaling.attention_factor = s.value("attention_factor", 0.0);
  scaling.short_factor = s.value("short_factor", std::vector<double>{});
  scaling.long_factor = s.value("long_factor", std::vector<double>{});
  return scaling;
}

TEST(RopeScaling, InverseFrequenciesAttentionFactorsAndTablesMatchTheFormulas) {
  for (const char* name :
       {"default", "default_partial", "linear", "dynamic_within", "dynamic_beyond", "yarn_qwen25", "yarn_gpt_oss",
        "yarn_deepseek", "yarn_attention_factor", "llama3", "longrope_long", "longrope_short"}) {
    SCOPED_TRACE(name);
    ReferenceCase ref(std::string("rope_scaling_") + name);
    const ops::RopeScaling scaling = scaling_of(nlohmann::json::parse(ref.meta("scaling")));
    const int64_t dim = ref.meta_int("rotary_dim"), max_positions = ref.meta_int("max_positions");
    const double theta = ref.meta_double("theta");
    const std::vector<double> expected = nlohmann::json::parse(ref.meta("inv_freq")).get<std::vector<double>>();
    const std::vector<double> frequency = ops::rope_inverse_frequencies(dim, max_positions, theta, scaling);
    ASSERT_EQ(frequency.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(frequency[i], expected[i], 1e-12 * expected[i]) << i;
    const double attention = ref.meta_double("attention_factor");
    EXPECT_NEAR(ops::rope_attention_factor(scaling), attention, 1e-14 * attention);

    const ops::RopeTable table = ops::rope_table(dim, max_positions, theta, scaling);
    ASSERT_EQ(table.cos.shape(), (Shape{max_positions, dim / 2}));
    const Tensor cos = ref.get("cos"), sin = ref.get("sin");
    const int64_t rows = cos.size(0);
    EXPECT_TRUE(testing::all_close(table.cos.narrow(0, 0, rows).contiguous(), cos, 1.2e-7 * attention, 0.0));
    EXPECT_TRUE(testing::all_close(table.sin.narrow(0, 0, rows).contiguous(), sin, 1.2e-7 * attention, 0.0));
  }
}

// DeepSeek-V3's softmax scale correction: 0.1 * mscale * ln(factor) + 1 above factor 1, else 1.
TEST(RopeScaling, YarnMscale) {
  EXPECT_DOUBLE_EQ(ops::yarn_get_mscale(40.0, 1.0), 0.1 * std::log(40.0) + 1.0);
  EXPECT_DOUBLE_EQ(ops::yarn_get_mscale(40.0, 0.707), 0.1 * 0.707 * std::log(40.0) + 1.0);
  EXPECT_EQ(ops::yarn_get_mscale(1.0, 5.0), 1.0);
  EXPECT_EQ(ops::yarn_get_mscale(0.5), 1.0);
}

TEST(RopeScaling, BadParametersAreRefused) {
  ops::RopeScaling longrope{.type = ops::RopeScalingType::longrope, .original_max_position = 16};
  longrope.short_factor = {1.0, 1.0};
  longrope.long_factor = {1.0, 1.0};
  EXPECT_NO_THROW(ops::rope_table(4, 8, 10000.0, longrope));
  EXPECT_THROW(ops::rope_table(8, 8, 10000.0, longrope), Error);                              // 4 factors needed
  EXPECT_THROW(ops::rope_table(8, 8, 10000.0, {.type = ops::RopeScalingType::yarn}), Error);  // no factor
  EXPECT_THROW(ops::rope_table(2, 8, 10000.0, {.type = ops::RopeScalingType::dynamic, .factor = 2.0}), Error);
}

class RopePartial : public ::testing::TestWithParam<DType> {};

// The first 12 of 16 features rotate (pairs within them), the rest pass through; inverse = backward.
TEST_P(RopePartial, MatchesReference) {
  const DType dtype = GetParam();
  for (const char* name : {"rope_partial_interleaved", "rope_partial_half"}) {
    SCOPED_TRACE(name);
    ReferenceCase ref(name);
    const ops::RopeTable table =
        ops::rope_table(ref.meta_int("rotary_dim"), ref.meta_int("max_positions"), ref.meta_double("theta"), {});
    const ops::RopeStyle style = ref.meta("style") == "half" ? ops::RopeStyle::half : ops::RopeStyle::interleaved;
    const Tensor positions = ref.get("positions");
    expect_matches_reference(ops::rope(ref.get("x", dtype), table, positions, style), ref.get("y"), dtype);
    expect_matches_reference(ops::rope(ref.get("grad_y", dtype), table, positions, style, /*inverse=*/true),
                             ref.get("grad_x"), dtype);
  }
}

TEST(RopePartialErrors, TableWiderThanTheHeadIsRefused) {
  const ops::RopeTable table = ops::rope_table(16, 8, 10000.0, {});
  EXPECT_THROW(ops::rope(Tensor::zeros({1, 2, 1, 12}), table, Tensor(), ops::RopeStyle::half), Error);
}

INSTANTIATE_TEST_SUITE_P(DTypes, RopePartial, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// CUDA against the CPU on a partial table (the copied tail included), both pairings, forward and inverse.
TEST(CudaRopePartial, MatchesCpu) {
  TITAN_REQUIRE_CUDA();
  const ops::RopeScaling yarn{.type = ops::RopeScalingType::yarn, .factor = 4.0, .original_max_position = 16};
  const ops::RopeTable host = ops::rope_table(10, 32, 10000.0, yarn);
  const ops::RopeTable device = ops::rope_table(10, 32, 10000.0, yarn, Device::cuda());
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = testing::random_cpu({2, 7, 3, 16}, dtype, 4, -2.0, 2.0);
    for (ops::RopeStyle style : {ops::RopeStyle::interleaved, ops::RopeStyle::half}) {
      for (bool inverse : {false, true}) {
        const Tensor expected = ops::rope(x, host, Tensor(), style, inverse);
        const Tensor got = testing::on_cpu(ops::rope(testing::on_cuda(x), device, Tensor(), style, inverse));
        const double scale = testing::max_abs(expected);
        EXPECT_TRUE(testing::all_close(got, expected, 4e-7 * scale, dtype == DType::bf16 ? 1.0 / 128 : 4e-7));
      }
    }
  }
}

}  // namespace rope_scaling_test
}  // namespace titan
