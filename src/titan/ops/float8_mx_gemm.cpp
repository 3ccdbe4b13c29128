// The block-scaled MXFP8 GEMM's pieces (ops/float8.h): the codes of MX
// values, their scales in cuBLASLt's tiled layout, and the GEMM, whose
// kernel is CUDA's only (ops/cuda/float8_gemm.cu).
#include "titan/core/copy.h"
#include "titan/core/trace_context.h"
#include "titan/ops/checks.h"
#include "titan/ops/float8.h"

namespace titan::ops {

namespace {

constexpr int64_t kTileRows = 128, kTileCols = 4;

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

void check_mx_operand(const Tensor& codes, const Tensor& scales, const char* codes_name, const char* scales_name) {
  check_rank("mx_tensor_core_mm", codes, 2, codes_name);
  check_dtype("mx_tensor_core_mm", codes, {DType::f8e4m3, DType::f8e5m2}, codes_name);
  check_contiguous("mx_tensor_core_mm", codes, codes_name);
  check_dtype("mx_tensor_core_mm", scales, {DType::u8}, scales_name);
  TITAN_CHECK(scales.dim() == 2 && scales.size(0) == codes.size(0) && scales.size(1) * kMxBlockSize == codes.size(1),
              "mx_tensor_core_mm: {} {} is not one exponent per {} codes of {} {}", scales_name,
              shape_str(scales.shape()), kMxBlockSize, codes_name, shape_str(codes.shape()));
}

}  // namespace

bool mx_tensor_cores(Device device) {
  return device.is_cuda() && mx_tensor_cores_query.has_kernel(DeviceType::cuda) && mx_tensor_cores_query(device);
}

Tensor mx_tensor_core_mm(const Tensor& a, const Tensor& a_scales, const Tensor& bt, const Tensor& b_scales,
                         DType out_dtype) {
  const trace::OpScope op_scope("mx_tensor_core_mm");
  check_mx_operand(a, a_scales, "a", "a_scales");
  check_mx_operand(bt, b_scales, "bt", "b_scales");
  check_same_device("mx_tensor_core_mm", bt, a);
  TITAN_CHECK(a.size(1) == bt.size(1), "mx_tensor_core_mm: a {} and bt {} differ in K", shape_str(a.shape()),
              shape_str(bt.shape()));
  TITAN_CHECK(!(a.dtype() == DType::f8e5m2 && bt.dtype() == DType::f8e5m2),
              "mx_tensor_core_mm: two e5m2 operands (cuBLASLt has no such FP8 GEMM)");
  TITAN_CHECK(out_dtype == DType::f32 || out_dtype == DType::bf16, "mx_tensor_core_mm: out_dtype must be f32 or bf16");
  TITAN_CHECK(mx_tensor_cores(a.device()),
              "mx_tensor_core_mm: block-scaled MXFP8 GEMMs need a GPU of compute capability 10.0 or later, not {}",
              a.device().str());
  Tensor out = Tensor::empty({a.size(0), bt.size(0)}, out_dtype, a.device());
  mx_tensor_core_mm_kernels(a.device(), out, a, mx_scale_tiles(a_scales), bt, mx_scale_tiles(b_scales));
  return out;
}

Tensor float8_mx_codes(const Tensor& values, const Tensor& exponents, Float8Format format) {
  const trace::OpScope op_scope("float8_mx_codes");
  check_rank("float8_mx_codes", values, 2, "values");
  check_dtype("float8_mx_codes", values, {DType::bf16}, "values");
  check_contiguous("float8_mx_codes", values, "values");
  check_dtype("float8_mx_codes", exponents, {DType::u8}, "exponents");
  check_contiguous("float8_mx_codes", exponents, "exponents");
  check_same_device("float8_mx_codes", exponents, values);
  TITAN_CHECK(
      exponents.dim() == 2 && exponents.size(0) == values.size(0) && exponents.size(1) * kMxBlockSize == values.size(1),
      "float8_mx_codes: exponents {} are not one per {} values of {}", shape_str(exponents.shape()), kMxBlockSize,
      shape_str(values.shape()));
  Tensor codes = Tensor::empty(values.shape(), float8_dtype(format), values.device());
  if (!values.device().is_meta() && values.numel() > 0) {
    float8_mx_codes_kernels(values.device(), codes, values, exponents);
  }
  return codes;
}

Tensor mx_scale_tiles(const Tensor& scales) {
  const trace::OpScope op_scope("mx_scale_tiles");
  check_rank("mx_scale_tiles", scales, 2, "scales");
  check_dtype("mx_scale_tiles", scales, {DType::u8}, "scales");
  const int64_t rows = round_up(scales.size(0), kTileRows), cols = round_up(scales.size(1), kTileCols);
  Tensor padded = Tensor::zeros({rows, cols}, DType::u8, scales.device());
  if (scales.numel() > 0) copy_(padded.narrow(0, 0, scales.size(0)).narrow(1, 0, scales.size(1)), scales);
  // Row 32 q + p of a tile row, column c of a tile: [tile row, q, p, tile, c] -> [tile row, tile, p, q, c].
  return padded.view({rows / kTileRows, kTileRows / 32, 32, cols / kTileCols, kTileCols})
      .permute({0, 3, 2, 1, 4})
      .contiguous()
      .view({-1});
}

}  // namespace titan::ops
