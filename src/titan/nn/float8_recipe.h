// A float8 training recipe: how each of a Linear's three GEMMs casts its two
// operands (ops/float8.h), as torchao's Float8LinearConfig and MXLinear
// define them. Forward y = x @ W^T reduces over in; the input gradient
// gy @ W reduces over out; the weight gradient gy^T @ x reduces over the
// tokens. Each operand is cast along the dim its GEMM reduces, so a rowwise
// or MX weight is cast twice (along in, then along out), each from the
// high-precision weight; a cast left empty keeps that operand in high
// precision (rowwise_with_gw_hp's weight gradient).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "titan/ops/float8.h"

namespace titan::nn {

struct Float8LinearRecipe {
  std::string name;
  std::optional<ops::Float8Cast> input, weight, grad_output;  // forward's x and W; the input gradient's gy
  std::optional<ops::Float8Cast> weight_for_grad_input;       // the input gradient's W
  std::optional<ops::Float8Cast> input_for_grad_weight, grad_output_for_grad_weight;  // the weight gradient's
  // Run the GEMMs of two scaled operands on fp8 tensor cores where the device
  // has them (ops::float8_tensor_core_mm; TorchTitan's emulate = false). The
  // numbers are the emulation's; the CPU always emulates.
  bool tensor_cores = false;
  // Whether any cast is MX: the GEMMs' reduced dims (in, out and the token
  // count) must then be multiples of 32.
  bool uses_mx_blocks() const;
};

// TorchTitan's recipe names: quantize.linear.float8.recipe_name "tensorwise"
// (also what an empty name means: e4m3 x and W, e5m2 gradients, one scale
// per tensor), "rowwise" (all e4m3, one power-of-two scale per row the GEMM
// reduces), "rowwise_with_gw_hp" (rowwise, but the weight gradient in high
// precision and the input gradient's W tensorwise), and
// quantize.linear.mx.recipe_name "mxfp8_cublas" (also "mxfp8": all e4m3,
// 32-element blocks with e8m0 scales along each GEMM's reduced dim).
// Unknown names throw, listing the known ones.
Float8LinearRecipe float8_linear_recipe(std::string_view name);
// The names float8_linear_recipe accepts, for errors and help.
const std::vector<std::string>& float8_linear_recipe_names();
const std::vector<std::string>& mx_linear_recipe_names();

// The MoE experts' grouped-GEMM recipes (TorchTitan's quantize.grouped_mm.*
// converters, torchao's MoE training): every operand of the three grouped
// GEMMs cast one way, along the dim its GEMM reduces (the weight gradient's
// along each expert's tokens). quantize.grouped_mm.float8: e4m3 with
// power-of-two scales per row (torchao's FP8_ROWWISE, its only float8 one);
// quantize.grouped_mm.mx with recipe_name "mxfp8": e4m3 in blocks of 32 with
// RCEIL e8m0 scales. Other names throw, naming the key.
ops::Float8Cast float8_grouped_recipe(std::string_view converter, std::string_view mx_recipe_name);

}  // namespace titan::nn
