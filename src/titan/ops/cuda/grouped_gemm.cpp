// CUDA grouped GEMM (see grouped_gemm_kernels.cuh): dtype and size checks and
// the launch. The counts are never read here: the kernels take them from
// device memory, so the check the CPU kernel makes (counts adding up to the
// rows) cannot be made without waiting for the device, and is not; the
// kernels clamp bad counts instead of reading or writing out of bounds.
#include <cstdint>
#include <limits>

#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/grouped_gemm_kernels.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/grouped_gemm.h"

namespace titan::ops::cuda {
namespace {

GroupedProduct product_of(GroupedGemmKind kind) {
  switch (kind) {
    case GroupedGemmKind::forward:
      return GroupedProduct::forward;
    case GroupedGemmKind::input_grad:
      return GroupedProduct::input_grad;
    case GroupedGemmKind::weight_grad:
      return GroupedProduct::weight_grad;
  }
  fail("grouped_gemm: unknown product kind {}", static_cast<int>(kind));
}

void grouped_gemm_kernel(GroupedGemmKind kind, const Tensor& out, const Tensor& a, const Tensor& b,
                         const Tensor& counts) {
  if (a.dtype() != DType::f32 && a.dtype() != DType::bf16) unsupported_dtype("grouped_gemm", a.device(), a.dtype());
  TITAN_CHECK(b.dtype() == a.dtype(), "grouped_gemm on {}: operands are {} and {}", a.device().str(),
              dtype_name(a.dtype()), dtype_name(b.dtype()));
  TITAN_CHECK(counts.device() == a.device(), "grouped_gemm: counts on {} but rows on {} (the kernel reads them there)",
              counts.device().str(), a.device().str());
  const GroupedProduct product = product_of(kind);
  const bool weight_grad = product == GroupedProduct::weight_grad;
  const int64_t experts = counts.numel(), rows = a.size(0);
  // forward / input_grad: w = b [E, out, in]; weight_grad: grad_w = out [E, out, in].
  const Tensor& weight = weight_grad ? out : b;
  const int64_t out_features = weight.size(1), in_features = weight.size(2);
  const int64_t tile = kGroupedGemmTile;
  const int64_t column_tiles = ((product == GroupedProduct::forward ? out_features : in_features) + tile - 1) / tile;
  if (weight_grad) {
    TITAN_CHECK(experts <= kGroupedGemmMaxGridYZ && (out_features + tile - 1) / tile <= kGroupedGemmMaxGridYZ &&
                    column_tiles <= std::numeric_limits<int32_t>::max(),
                "grouped_gemm on {}: {} experts of [{}, {}] weights exceed the launch grid", a.device().str(), experts,
                out_features, in_features);
  } else {
    TITAN_CHECK(column_tiles <= kGroupedGemmMaxGridYZ &&
                    (rows + tile - 1) / tile + experts <= std::numeric_limits<int32_t>::max(),
                "grouped_gemm on {}: {} rows of {} experts of [{}, {}] weights exceed the launch grid",
                a.device().str(), rows, experts, out_features, in_features);
  }
  const Tensor workspace = Tensor::empty({grouped_gemm_workspace_words(experts)}, DType::i64, a.device());
  TITAN_CUDA_CHECK(launch_grouped_gemm(product, a.dtype() == DType::bf16, out.data_ptr(), a.data_ptr(), b.data_ptr(),
                                       counts.data<int64_t>(), experts, rows, out_features, in_features,
                                       workspace.data<int64_t>(), current_stream()));
}

}  // namespace

void register_grouped_gemm() { grouped_gemm_kernels.set_kernel(DeviceType::cuda, grouped_gemm_kernel); }

}  // namespace titan::ops::cuda
