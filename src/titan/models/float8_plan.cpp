#include "titan/models/float8_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "titan/core/error.h"
#include "titan/nn/float8_recipe.h"
#include "titan/nn/linear.h"
#include "titan/nn/moe.h"

namespace titan::models {

namespace {

// torchao's thresholds (torchao/float8/float8_linear_utils.py), from its H100 benchmarks.
bool too_small_to_gain(int64_t in, int64_t out, std::string_view recipe_name) {
  if (recipe_name == "rowwise") return out <= 2048 || in <= 1024 || (out <= 4096 && in <= 2048);
  TITAN_CHECK(recipe_name.empty() || recipe_name == "tensorwise",
              "quantize.linear.float8.filter_fqns' \"{}\" has thresholds for the tensorwise and rowwise recipes only, "
              "not '{}' (as torchao's)",
              kAutoFilterSmallKn, recipe_name);
  return in <= 4096 && out <= 1024;
}

}  // namespace

bool float8_module_filter(const std::string& fqn, int64_t in, int64_t out, const std::vector<std::string>& filter_fqns,
                          std::string_view recipe_name) {
  if (in % 16 != 0 || out % 16 != 0) return false;
  // TorchTitan's MX converter reads filter_fqns as plain names only.
  const auto& mx_names = nn::mx_linear_recipe_names();
  const bool mx = std::find(mx_names.begin(), mx_names.end(), recipe_name) != mx_names.end();
  bool automatic = false;
  for (const std::string& entry : filter_fqns) {
    if (entry == kAutoFilterSmallKn && !mx) {
      automatic = true;
    } else if (fqn.find(entry) != std::string::npos) {
      return false;
    }
  }
  return !automatic || !too_small_to_gain(in, out, recipe_name);
}

std::vector<std::string> apply_float8(nn::Module& model, const Float8Options& options) {
  nn::Float8LinearRecipe chosen = nn::float8_linear_recipe(options.recipe_name);
  chosen.tensor_cores = !options.emulate;
  const auto recipe = std::make_shared<const nn::Float8LinearRecipe>(std::move(chosen));
  std::vector<std::string> converted;
  for (auto& [fqn, module] : model.named_modules()) {
    auto* linear = dynamic_cast<nn::Linear*>(module);
    if (linear == nullptr) continue;
    const int64_t in = linear->config.in_features, out = linear->config.out_features;
    if (!float8_module_filter(fqn, in, out, options.filter_fqns, options.recipe_name)) continue;
    TITAN_CHECK(!recipe->uses_mx_blocks() || (in % ops::kMxBlockSize == 0 && out % ops::kMxBlockSize == 0),
                "{}: MXFP8 casts in blocks of {} along both dims of {} ([{}, {}]), which do not divide; add \"{}\" to "
                "{}.filter_fqns to keep it in high precision",
                options.converter, ops::kMxBlockSize, fqn, out, in, fqn, options.converter);
    linear->set_float8(recipe);
    linear->weight->float8_all_gather = options.fsdp_float8_all_gather;
    converted.push_back(fqn);
  }
  return converted;
}

std::vector<std::string> apply_float8_grouped(nn::Module& model, const Float8GroupedOptions& options) {
  const ops::Float8Cast cast = nn::float8_grouped_recipe(options.converter, options.recipe_name);
  TITAN_CHECK(!options.fqns.empty(),
              "{}.fqns is empty: name the MoE experts to convert (TorchTitan's example: \"experts\")",
              options.converter);
  const int64_t multiple = cast.scaling == ops::Float8Scaling::mx_block ? ops::kMxBlockSize : 16;
  std::vector<std::string> converted;
  for (auto& [fqn, module] : model.named_modules()) {
    auto* experts = dynamic_cast<nn::GroupedExperts*>(module);
    if (experts == nullptr) continue;
    const std::string& name = fqn;  // a structured binding: lambdas may not capture it (C++20)
    const bool picked = std::any_of(options.fqns.begin(), options.fqns.end(),
                                    [&](const std::string& entry) { return name.find(entry) != std::string::npos; });
    if (!picked) continue;
    const int64_t dim = experts->config.dim, hidden = experts->config.hidden_dim;
    TITAN_CHECK(dim % multiple == 0 && hidden % multiple == 0,
                "{}: {} has dim {} and hidden_dim {}; its grouped GEMMs cast along both, which need multiples of {}",
                options.converter, fqn, dim, hidden, multiple);
    experts->set_float8(cast);
    converted.push_back(fqn);
  }
  TITAN_CHECK(!converted.empty(), "{}.fqns [{}] names no MoE experts module of this model", options.converter,
              fmt::format("{}", fmt::join(options.fqns, ", ")));
  return converted;
}

}  // namespace titan::models
