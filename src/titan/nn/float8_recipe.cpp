#include "titan/nn/float8_recipe.h"

#include <fmt/format.h>

#include <algorithm>

#include "titan/core/error.h"

namespace titan::nn {

using ops::Float8Cast;
using ops::Float8Format;
using ops::Float8Scaling;

bool Float8LinearRecipe::uses_mx_blocks() const {
  for (const auto* cast :
       {&input, &weight, &grad_output, &weight_for_grad_input, &input_for_grad_weight, &grad_output_for_grad_weight}) {
    if (cast->has_value() && (*cast)->scaling == Float8Scaling::mx_block) return true;
  }
  return false;
}

const std::vector<std::string>& float8_linear_recipe_names() {
  static const std::vector<std::string> names = {"tensorwise", "rowwise", "rowwise_with_gw_hp"};
  return names;
}

const std::vector<std::string>& mx_linear_recipe_names() {
  static const std::vector<std::string> names = {"mxfp8_cublas", "mxfp8"};
  return names;
}

Float8LinearRecipe float8_linear_recipe(std::string_view name) {
  Float8LinearRecipe recipe;
  recipe.name = name.empty() ? "tensorwise" : std::string(name);
  if (recipe.name == "tensorwise") {
    // torchao's default Float8LinearConfig: gradients in e5m2, which keeps range over precision.
    const Float8Cast e4m3{Float8Scaling::tensorwise, Float8Format::e4m3, false};
    const Float8Cast e5m2{Float8Scaling::tensorwise, Float8Format::e5m2, false};
    recipe.input = recipe.input_for_grad_weight = e4m3;
    recipe.weight = recipe.weight_for_grad_input = e4m3;
    recipe.grad_output = recipe.grad_output_for_grad_weight = e5m2;
    return recipe;
  }
  const Float8Cast rowwise{Float8Scaling::axiswise, Float8Format::e4m3, true};
  if (recipe.name == "rowwise") {
    recipe.input = recipe.weight = recipe.grad_output = rowwise;
    recipe.weight_for_grad_input = recipe.input_for_grad_weight = recipe.grad_output_for_grad_weight = rowwise;
    return recipe;
  }
  if (recipe.name == "rowwise_with_gw_hp") {
    recipe.input = recipe.weight = recipe.grad_output = rowwise;
    recipe.weight_for_grad_input = Float8Cast{Float8Scaling::tensorwise, Float8Format::e4m3, true};
    return recipe;  // the weight gradient's casts stay empty: high precision
  }
  const auto& mx = mx_linear_recipe_names();
  if (std::find(mx.begin(), mx.end(), recipe.name) != mx.end()) {
    const Float8Cast block{Float8Scaling::mx_block, Float8Format::e4m3, true};
    recipe.input = recipe.weight = recipe.grad_output = block;
    recipe.weight_for_grad_input = recipe.input_for_grad_weight = recipe.grad_output_for_grad_weight = block;
    return recipe;
  }
  fail("unknown float8 recipe '{}' (expected one of {}, or for MX {})", name,
       fmt::join(float8_linear_recipe_names(), ", "), fmt::join(mx, ", "));
}

ops::Float8Cast float8_grouped_recipe(std::string_view converter, std::string_view mx_recipe_name) {
  if (converter == "quantize.grouped_mm.float8") return Float8Cast{Float8Scaling::axiswise, Float8Format::e4m3, true};
  TITAN_CHECK(converter == "quantize.grouped_mm.mx", "unknown grouped-GEMM converter '{}'", converter);
  TITAN_CHECK(mx_recipe_name == "mxfp8", "quantize.grouped_mm.mx.recipe_name: unknown recipe '{}' (expected mxfp8)",
              mx_recipe_name);
  return Float8Cast{Float8Scaling::mx_block, Float8Format::e4m3, true, ops::MxScaleRounding::rceil};
}

}  // namespace titan::nn
