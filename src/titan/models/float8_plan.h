// Float8 and MXFP8 training from outside the model code: TorchTitan's
// quantize.linear.float8 and quantize.linear.mx model converters. Installs a
// recipe (nn/float8_recipe.h) on the Linears that TorchTitan's filter picks;
// nothing else changes: the weights stay high precision, checkpoints are
// those of the unconverted model.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "titan/nn/module.h"

namespace titan::models {

// filter_fqns' entry that asks for torchao's size thresholds as well.
inline constexpr std::string_view kAutoFilterSmallKn = "auto_filter_small_kn";

// TorchTitan's module filter for a Linear named `fqn` with weight [out, in]:
// both dims multiples of 16 (the fp8 tensor cores' rule) and no entry of
// `filter_fqns` a substring of fqn. With kAutoFilterSmallKn among them,
// torchao's _auto_filter_for_recipe also skips layers too small to gain
// (tensorwise: in <= 4096 and out <= 1024; rowwise: out <= 2048, in <= 1024,
// or out <= 4096 and in <= 2048; other float8 recipes are an error, as in
// torchao). For an MX recipe the entry is a plain name, as TorchTitan's MX
// converter reads it.
bool float8_module_filter(const std::string& fqn, int64_t in, int64_t out, const std::vector<std::string>& filter_fqns,
                          std::string_view recipe_name);

struct Float8Options {
  std::string converter;    // "quantize.linear.float8" or "quantize.linear.mx": named in errors
  std::string recipe_name;  // see nn::float8_linear_recipe
  std::vector<std::string> filter_fqns;
  // quantize.linear.float8.enable_fsdp_float8_all_gather: mark the converted
  // weights (nn::Parameter::float8_all_gather) to be cast from the master.
  bool fsdp_float8_all_gather = false;
  // quantize.linear.float8.emulate: false runs the scaled GEMMs on fp8 tensor
  // cores where the GPU has them (nn::Float8LinearRecipe::tensor_cores).
  bool emulate = false;
};

// Installs the recipe on every Linear of `model` the filter picks and returns
// their FQNs. An MX recipe needs both dims of every picked layer divisible by
// 32 (its blocks run along in for the forward, along out for the input
// gradient): a layer that is not is an error naming it and `<converter>.filter_fqns`.
std::vector<std::string> apply_float8(nn::Module& model, const Float8Options& options);

struct Float8GroupedOptions {
  std::string converter;          // "quantize.grouped_mm.float8" or "quantize.grouped_mm.mx": named in errors
  std::string recipe_name;        // quantize.grouped_mm.mx.recipe_name (the float8 converter has one recipe)
  std::vector<std::string> fqns;  // MoE experts whose name contains one of these are converted
};

// Installs the grouped recipe (nn::float8_grouped_recipe) on every MoE
// experts module whose FQN contains an entry of `fqns` (TorchTitan's filter)
// and returns their FQNs. Errors, naming the key: no entry, no module
// matched, or dims the recipe cannot cast (the fp8 GEMMs' multiples of 16;
// MX's blocks of 32 along dim and hidden_dim).
std::vector<std::string> apply_float8_grouped(nn::Module& model, const Float8GroupedOptions& options);

}  // namespace titan::models
