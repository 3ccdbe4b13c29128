// Every flavor's parameter count against the count its publisher gives, from
// a model built on the meta device (no memory) and from the closed formula.
#include <gtest/gtest.h>

#include "titan/core/allocator.h"
#include "titan/models/model_spec.h"

namespace titan {
namespace flavors_test {

int64_t meta_count(const std::string& model, const std::string& flavor) {
  const int64_t live = memory_stats(DeviceType::cpu).live_bytes;
  auto decoder = models::model_config(model, flavor).build(Device::meta());
  const int64_t count = decoder->num_parameters();
  EXPECT_EQ(memory_stats(DeviceType::cpu).live_bytes, live) << model << " " << flavor;
  return count;
}

// Exact counts published with the weights (Meta's model cards and the
// safetensors index of each release).
TEST(Flavors, Llama3MatchesPublishedCounts) {
  const std::vector<std::pair<std::string, int64_t>> published{
      {"1B", 1235814400}, {"3B", 3212749824}, {"8B", 8030261248}, {"70B", 70553706496}, {"405B", 405853388800}};
  for (const auto& [flavor, count] : published) {
    EXPECT_EQ(models::parameter_count(models::model_config("llama3", flavor)), count) << flavor;
    EXPECT_EQ(meta_count("llama3", flavor), count) << flavor;
  }
  // The debugmodel: dim 256, 6 layers, 16 heads, FFN 768, theta 500000.
  const models::DecoderConfig debug = models::model_config("llama3", "debugmodel", 2048);
  EXPECT_EQ(debug.layers.front().feed_forward.hidden_dim, 768);
  EXPECT_EQ(debug.n_layers(), 6);
  EXPECT_EQ(debug.layers.front().attention.n_heads, 16);
  EXPECT_EQ(debug.rope_theta, 500000.0);
  EXPECT_EQ(models::model_config("llama3", "8B").layers.front().feed_forward.hidden_dim, 14336);
  EXPECT_EQ(models::model_config("llama3", "70B").layers.front().feed_forward.hidden_dim, 28672);
  EXPECT_EQ(models::model_config("llama3", "405B").layers.front().feed_forward.hidden_dim, 53248);
}

// Qwen 3: the model cards give total and non-embedding counts to two or three
// significant figures (e.g. 4.0B / 3.6B); Qwen3-8B's safetensors index gives
// 16,381,470,720 bytes of bf16, i.e. 8,190,735,360 parameters exactly.
TEST(Flavors, Qwen3MatchesPublishedCounts) {
  struct Published {
    std::string flavor;
    double total_billions, non_embedding_billions, tolerance;
  };
  const std::vector<Published> published{{"0.6B", 0.6, 0.44, 0.05}, {"1.7B", 1.7, 1.4, 0.05},
                                         {"4B", 4.0, 3.6, 0.05},    {"8B", 8.2, 6.95, 0.05},
                                         {"14B", 14.8, 13.2, 0.05}, {"32B", 32.8, 31.2, 0.05}};
  for (const auto& p : published) {
    const models::DecoderConfig config = models::model_config("qwen3", p.flavor);
    const int64_t total = models::parameter_count(config);
    EXPECT_EQ(meta_count("qwen3", p.flavor), total) << p.flavor;
    const double embedding = static_cast<double>(config.vocab_size * config.dim()) * (config.tie_embeddings ? 1 : 2);
    EXPECT_NEAR(static_cast<double>(total) / 1e9, p.total_billions, p.tolerance) << p.flavor;
    EXPECT_NEAR((static_cast<double>(total) - embedding) / 1e9, p.non_embedding_billions, p.tolerance) << p.flavor;
  }
  EXPECT_EQ(models::parameter_count(models::model_config("qwen3", "8B")), 8190735360);
  EXPECT_EQ(models::parameter_count(models::model_config("qwen3", "0.6B")), 596049920);
}

TEST(Flavors, FlopsPerTokenFormula) {
  // llama3 8B at seq 8192: 6 * (8030261248 - 128256 * 4096) + 12 * 32 * 32 * 128 * 8192.
  const models::DecoderConfig config = models::model_config("llama3", "8B");
  const double expected = 6.0 * (8030261248.0 - 128256.0 * 4096.0) + 12.0 * 32 * 32 * 128 * 8192;
  EXPECT_DOUBLE_EQ(models::training_flops_per_token(config, 8192), expected);
}

TEST(Flavors, UnknownNamesAreErrors) {
  EXPECT_THROW(models::model_config("llama4", "8B"), Error);
  try {
    models::model_config("llama3", "7B");
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("debugmodel"), std::string::npos) << error.what();
  }
}

}  // namespace flavors_test
}  // namespace titan
