// FLUX's Diffusers layout (models/flux/flux_diffusers.h) against the mapping
// tests/reference/flux.py's diffusers_state writes from Diffusers'
// FluxTransformer2DModel names: every tensor equal bit for bit both ways, a
// folder written and read back into a fresh model bit for bit, and a missing
// or unknown tensor refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "models/flux_tiny_case.h"
#include "support/model_checks.h"
#include "support/reference.h"
#include "titan/models/flux/flux_diffusers.h"

namespace titan {
namespace flux_diffusers_test {

using models::flux::FluxConfig;
using models::flux::FluxModel;
using models::flux::StateDict;

FluxConfig tiny() { return testing::flux_tiny_config(); }
const testing::ReferenceCase& reference() { return testing::flux_tiny_case(); }

// The case's tensors named "<prefix><name>", by name.
StateDict with_prefix(const std::string& prefix) {
  StateDict state;
  for (const std::string& name : reference().tensor_names()) {
    if (name.rfind(prefix, 0) == 0) state[name.substr(prefix.size())] = reference().get(name);
  }
  return state;
}

void expect_bitwise_equal(const StateDict& actual, const StateDict& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [name, tensor] : expected) {
    const auto found = actual.find(name);
    ASSERT_NE(found, actual.end()) << name;
    EXPECT_EQ(found->second.shape(), tensor.shape()) << name;
    EXPECT_EQ(found->second.to_floats(), tensor.to_floats()) << name;
  }
}

TEST(FluxDiffusers, EveryTensorMapsBitForBitBothWays) {
  const StateDict titan_state = with_prefix("param."), diffusers = with_prefix("diffusers.");
  expect_bitwise_equal(models::flux::flux_to_diffusers(titan_state, tiny()), diffusers);
  expect_bitwise_equal(models::flux::flux_from_diffusers(diffusers, tiny()), titan_state);
}

TEST(FluxDiffusers, AFolderRoundTripsIntoAFreshModel) {
  FluxModel model(tiny());
  testing::load_reference_parameters(model, reference());
  const std::string folder = ::testing::TempDir() + "/flux_diffusers_round_trip";
  std::filesystem::remove_all(folder);
  models::flux::save_diffusers_transformer(model, folder);
  FluxModel loaded(tiny());
  models::flux::load_diffusers_transformer(loaded, folder);
  StateDict before, after;
  for (auto& [name, tensor] : model.named_state()) before[name] = tensor;
  for (auto& [name, tensor] : loaded.named_state()) after[name] = tensor;
  expect_bitwise_equal(after, before);
}

TEST(FluxDiffusers, MissingAndUnknownTensorsAreNamed) {
  StateDict diffusers = with_prefix("diffusers.");
  diffusers.erase("single_transformer_blocks.1.proj_mlp.weight");
  try {
    models::flux::flux_from_diffusers(diffusers, tiny());
    FAIL() << "a missing tensor was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("single_transformer_blocks.1.proj_mlp.weight"), std::string::npos);
  }
  StateDict extra = with_prefix("param.");
  extra["double_blocks.5.img_mod.lin.weight"] = Tensor::zeros({1});
  try {
    models::flux::flux_to_diffusers(extra, tiny());
    FAIL() << "an unknown tensor was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("double_blocks.5.img_mod.lin.weight"), std::string::npos);
  }
  // schnell's layout has no guidance embedder: dev's weights are refused for it by name.
  FluxConfig schnell = tiny();
  schnell.guidance_embed = false;
  EXPECT_THROW(models::flux::flux_from_diffusers(with_prefix("diffusers."), schnell), Error);
}

}  // namespace flux_diffusers_test
}  // namespace titan
