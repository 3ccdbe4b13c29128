// CUDA reductions: sum, mean, max and sum of squares to a 0-d f32 tensor on
// the device, the multi-tensor global L2 norm, and sum_to_shape (see
// reduction_kernels.cuh for the deterministic tiling).
#include <limits>
#include <vector>

#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/reduction_kernels.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/reduction.h"

namespace titan::ops::cuda {
namespace {

// f32 or bf16 (true), else the op's unsupported-dtype error.
bool is_bf16(const char* op, const Tensor& t) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16) unsupported_dtype(op, t.device(), t.dtype());
  return t.dtype() == DType::bf16;
}

// Scratch for one double partial per tile (8-byte elements; there is no f64
// dtype). The tile kernels launch one block per tile.
Tensor partials_for(int64_t tiles, Device device) {
  TITAN_CHECK(tiles < std::numeric_limits<int32_t>::max(), "reduction of {} tiles is too large for one CUDA grid",
              tiles);
  return Tensor::empty({tiles}, DType::i64, device);
}

ReduceKind kind_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ReduceKind::sum;
    case ReduceOp::mean:
      return ReduceKind::mean;
    case ReduceOp::max:
      return ReduceKind::max;
    case ReduceOp::sum_squares:
      return ReduceKind::sum_squares;
  }
  return ReduceKind::sum;
}

void reduce_kernel(ReduceOp op, const Tensor& out, const Tensor& x) {
  const bool bf16 = is_bf16("reduce", x);
  const Tensor partials = partials_for(reduce_tiles(x.numel()), out.device());
  TITAN_CUDA_CHECK(launch_reduce(kind_of(op), out.data<float>(), x.data_ptr(), bf16, x.numel(),
                                 static_cast<double*>(partials.data_ptr()), current_stream()));
}

void global_l2_norm_kernel(const Tensor& out, std::span<const Tensor> tensors) {
  std::vector<NormTensor> host;
  int64_t tiles = 0;
  for (const Tensor& t : tensors) {
    const bool bf16 = is_bf16("global_l2_norm", t);
    if (t.numel() == 0) continue;  // no tiles: kept out of the tile -> tensor search
    host.push_back({t.data_ptr(), t.numel(), tiles, bf16 ? 1 : 0});
    tiles += reduce_tiles(t.numel());
  }
  const Tensor partials = partials_for(tiles, out.device());
  const Tensor device =
      Tensor::empty({static_cast<int64_t>(host.size() * sizeof(NormTensor))}, DType::u8, out.device());
  TITAN_CUDA_CHECK(launch_global_l2_norm(out.data<float>(), host.data(), static_cast<NormTensor*>(device.data_ptr()),
                                         static_cast<int>(host.size()), tiles,
                                         static_cast<double*>(partials.data_ptr()), current_stream()));
}

void sum_to_shape_kernel(const Tensor& out, const Tensor& x) {
  const bool bf16 = is_bf16("sum_to_shape", x);
  TITAN_CHECK(x.dim() <= kMaxSumRank, "sum_to_shape on {}: rank {} is above the supported {}", x.device().str(),
              x.dim(), kMaxSumRank);
  SumToShapeLayout layout{};
  layout.rank = static_cast<int>(x.dim());
  const int64_t lead = x.dim() - out.dim();
  for (int64_t d = 0; d < x.dim(); ++d) {
    layout.sizes[d] = x.size(d);
    // As the CPU kernel: a dim is kept where out has it with a size other than 1.
    layout.out_strides[d] = d >= lead && out.size(d - lead) != 1 ? out.stride(d - lead) : 0;
  }
  if (out.numel() == 0) return;
  TITAN_CUDA_CHECK(launch_sum_to_shape(out.data_ptr(), x.data_ptr(), bf16, out.numel(), layout, current_stream()));
}

}  // namespace

void register_reduction() {
  reduce_kernels.set_kernel(DeviceType::cuda, reduce_kernel);
  global_l2_norm_kernels.set_kernel(DeviceType::cuda, global_l2_norm_kernel);
  sum_to_shape_kernels.set_kernel(DeviceType::cuda, sum_to_shape_kernel);
}

}  // namespace titan::ops::cuda
