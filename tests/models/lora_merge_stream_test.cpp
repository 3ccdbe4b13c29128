// The streamed LoRA merge of a model export (models/lora_merge_stream.h):
// whatever order a unit's parameters come by in, each adapted weight is
// handed on once, as W + (alpha / r) B A computed here by plain loops; other
// parameters pass unchanged and at once; adapters are kept, not handed on;
// and a weight whose adapter never comes is an error naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "titan/models/lora_merge_stream.h"
#include "titan/models/model_spec.h"
#include "titan/ops/random.h"

namespace titan::models {
namespace lora_merge_stream_test {

struct LoraModel {
  std::shared_ptr<Decoder> model;
  std::vector<std::pair<std::string, nn::Parameter*>> parameters;
};

// llama3's debug model with adapters on q and down whose B is not zero (PEFT starts B at zero).
LoraModel lora_model() {
  const ModelSpec& spec = model_spec("llama3");
  LoraModel built{spec.build(spec.config("debugmodel", 256), Device::cpu()), {}};
  Generator generator(3);
  for (const LoraAdapted& adapted : apply_lora(*built.model, {4, 8.0, 0.0, {"q", "down"}}, generator, nullptr)) {
    ops::normal_(adapted.adapter->lora_B->weight->data, 0.0, 0.02, generator);
  }
  for (auto& [name, parameter] : built.model->named_parameters()) built.parameters.emplace_back(name, parameter);
  return built;
}

// W + scale B A by loops, in double.
std::vector<float> merged_by_loops(const Tensor& w, const Tensor& a, const Tensor& b, double scale) {
  const std::vector<float> wv = w.to_floats(), av = a.to_floats(), bv = b.to_floats();
  const int64_t out = w.size(0), in = w.size(1), rank = a.size(0);
  std::vector<float> merged(wv.size());
  for (int64_t i = 0; i < out; ++i) {
    for (int64_t j = 0; j < in; ++j) {
      double sum = 0.0;
      for (int64_t r = 0; r < rank; ++r) sum += static_cast<double>(bv[i * rank + r]) * av[r * in + j];
      merged[i * in + j] = static_cast<float>(wv[i * in + j] + scale * sum);
    }
  }
  return merged;
}

TEST(LoraMergeStream, HandsOnEachWeightMergedOnceInAnyOrder) {
  LoraModel built = lora_model();
  std::vector<std::pair<std::string, nn::Parameter*>> order = built.parameters;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  LoraMergeStream merge(*built.model);
  std::map<std::string, std::vector<float>> handed;
  std::map<nn::Parameter*, std::string> names;
  for (const auto& [name, parameter] : built.parameters) names[parameter] = name;
  for (const auto& [name, parameter] : order) {
    merge.take(parameter, parameter->data, [&](nn::Parameter* p, const Tensor& full) {
      EXPECT_TRUE(handed.emplace(names.at(p), full.to_floats()).second) << names.at(p) << " handed on twice";
    });
  }
  merge.check_done();
  const std::vector<LoraAdapted> adapted = lora_adapters(*built.model);
  ASSERT_EQ(adapted.size(), 2u * built.model->layers->size());
  ASSERT_EQ(merge.adapters().size(), adapted.size());
  for (const LoraAdapted& a : adapted) {
    const std::string weight = a.module + ".weight";
    ASSERT_TRUE(handed.count(weight)) << weight;
    const std::vector<float> expected = merged_by_loops(a.linear->weight->data, a.adapter->lora_A->weight->data,
                                                        a.adapter->lora_B->weight->data, 8.0 / 4);
    const std::vector<float>& got = handed.at(weight);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected[i], 1e-5f + 1e-5f * std::abs(expected[i]));
    EXPECT_EQ(merge.adapters().at(a.module).first.to_floats(), a.adapter->lora_A->weight->data.to_floats());
    EXPECT_FALSE(handed.count(a.module + ".lora_A.weight"));
    EXPECT_FALSE(handed.count(a.module + ".lora_B.weight"));
  }
  // Everything else passes unchanged: the plain model's parameters, each once.
  const auto plain = model_spec("llama3").build(built.model->config, Device::meta());
  EXPECT_EQ(handed.size(), plain->named_parameters().size());
  EXPECT_EQ(handed.at("tok_embeddings.weight"), built.model->tok_embeddings->weight->data.to_floats());
}

TEST(LoraMergeStream, AWeightWithoutItsAdapterIsAnErrorNamingIt) {
  LoraModel built = lora_model();
  LoraMergeStream merge(*built.model);
  for (const auto& [name, parameter] : built.parameters) {
    if (name == "layers.1.feed_forward.w2.lora_B.weight") continue;
    merge.take(parameter, parameter->data, [](nn::Parameter*, const Tensor&) {});
  }
  try {
    merge.check_done();
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("layers.1.feed_forward.w2"), std::string::npos) << error.what();
  }
}

}  // namespace lora_merge_stream_test
}  // namespace titan::models
