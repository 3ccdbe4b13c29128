// CUDA rotary embedding: checks the table and positions live on the GPU (the
// entry point leaves that to the kernel) and launches. Positions outside the
// table are not checked here, which would need a device-to-host sync per call:
// the kernel writes NaN for them instead, so the mistake cannot pass silently.
#include "titan/ops/rope.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/rope_kernels.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

void rope_kernel(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
                 RopeStyle style, bool inverse) {
  if (x.dtype() != DType::f32 && x.dtype() != DType::bf16) unsupported_dtype("rope", x.device(), x.dtype());
  for (const Tensor* table : {&cos, &sin}) {
    TITAN_CHECK(table->dtype() == DType::f32 && table->is_contiguous() && table->device() == x.device() &&
                    table->dim() == 2 && table->size(1) * 2 == x.size(3) && table->size(0) == cos.size(0),
                "rope: the cos/sin table must be contiguous f32 [max_positions, {}] on {}, got {} {} on {}",
                x.size(3) / 2, x.device().str(), dtype_name(table->dtype()), shape_str(table->shape()),
                table->device().str());
  }
  if (positions.defined()) {
    TITAN_CHECK(positions.device() == x.device() && positions.is_contiguous(),
                "rope: positions must be contiguous on {}, got a tensor on {}", x.device().str(),
                positions.device().str());
  }
  RopeShape shape;
  shape.batch = x.size(0);
  shape.seq = x.size(1);
  shape.heads = x.size(2);
  shape.head_dim = x.size(3);
  shape.max_positions = cos.size(0);
  const void* position_data = positions.defined() ? positions.data_ptr() : nullptr;
  const int position_bytes = positions.defined() ? static_cast<int>(positions.element_size()) : 0;
  TITAN_CUDA_CHECK(launch_rope(x.dtype(), out.data_ptr(), x.data_ptr(), static_cast<const float*>(cos.data_ptr()),
                               static_cast<const float*>(sin.data_ptr()), position_data, position_bytes, shape,
                               style == RopeStyle::interleaved, inverse, current_stream()));
}

}  // namespace

void register_rope() { rope_kernels.set_kernel(DeviceType::cuda, rope_kernel); }

}  // namespace titan::ops::cuda
