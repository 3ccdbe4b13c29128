// The float8 converter's module filter (models/float8_plan.h) picks the
// Linears TorchTitan's rule picks: on the llama3 8B and 70B shapes (built on
// the meta device), for plain filter_fqns and for torchao's automatic
// thresholds, against tests/reference/make_float8_cases.py's lists, which
// apply TorchTitan's module_filter_fn and torchao's _auto_filter_for_recipe
// as written in Python.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/models/float8_plan.h"
#include "titan/models/model_spec.h"
#include "titan/nn/float8_recipe.h"
#include "titan/nn/linear.h"

namespace titan {
namespace float8_plan_test {

TEST(Float8Plan, FilterPicksTorchTitansLayersOnLlama3_8B_And_70B) {
  testing::ReferenceCase ref("float8_filter");
  for (const char* flavor : {"8B", "70B"}) {
    for (const char* setting : {"output", "none", "auto_tensorwise", "auto_rowwise", "kv"}) {
      SCOPED_TRACE(std::string(flavor) + " " + setting);
      const auto settings = nlohmann::json::parse(ref.meta(std::string("settings/") + setting));
      auto model = models::model_config("llama3", flavor).build(Device::meta());
      const std::vector<std::string> picked =
          models::apply_float8(*model, {"quantize.linear.float8", settings["recipe"].get<std::string>(),
                                        settings["filter_fqns"].get<std::vector<std::string>>()});
      const auto expected =
          nlohmann::json::parse(ref.meta(std::string(flavor) + "/" + setting)).get<std::vector<std::string>>();
      EXPECT_EQ(picked, expected);
      // The recipe is on exactly the picked Linears.
      int64_t with_recipe = 0;
      for (auto& [name, module] : model->named_modules()) {
        if (auto* linear = dynamic_cast<nn::Linear*>(module); linear != nullptr && linear->float8()) ++with_recipe;
      }
      EXPECT_EQ(with_recipe, static_cast<int64_t>(expected.size()));
    }
  }
}

// Dims that are multiples of 16 but not of 32 pass TorchTitan's filter, and
// MXFP8's blocks cannot cover them: the error names the layer and the key.
TEST(Float8Plan, MxRefusesALayerItsBlocksDoNotDivide) {
  struct Holder : nn::Module {
    explicit Holder(std::shared_ptr<nn::Linear> l) { register_module("proj", std::move(l)); }
  } holder(std::make_shared<nn::Linear>(nn::LinearConfig{48, 64}, Device::meta()));
  testing::expect_error(
      [&] {
        models::apply_float8(holder, {"quantize.linear.mx", "mxfp8_cublas", {}});
      },
      {"proj", "[64, 48]", "quantize.linear.mx.filter_fqns"});
  EXPECT_EQ(models::apply_float8(holder, {"quantize.linear.float8", "rowwise", {}}), std::vector<std::string>{"proj"});
  EXPECT_TRUE(models::apply_float8(holder, {"quantize.linear.mx", "mxfp8_cublas", {"proj"}}).empty());
}

TEST(Float8Plan, AutoFilterHasNoThresholdsForOtherRecipes) {
  EXPECT_FALSE(models::float8_module_filter("w", 4096, 1024, {"auto_filter_small_kn"}, "tensorwise"));
  EXPECT_TRUE(models::float8_module_filter("w", 4096, 2048, {"auto_filter_small_kn"}, ""));
  testing::expect_error(
      [] { models::float8_module_filter("w", 4096, 4096, {"auto_filter_small_kn"}, "rowwise_with_gw_hp"); },
      {"auto_filter_small_kn", "rowwise_with_gw_hp"});
  // TorchTitan's MX converter has no automatic filter: the entry is a name that matches nothing here.
  EXPECT_TRUE(models::float8_module_filter("w", 4096, 1024, {"auto_filter_small_kn"}, "mxfp8_cublas"));
}

}  // namespace float8_plan_test
}  // namespace titan
