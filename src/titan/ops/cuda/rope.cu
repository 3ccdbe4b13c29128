// CUDA rotary embedding: x and out [B, S, H, D] contiguous (f32 or bf16),
// cos and sin [max_positions, R/2] f32 (R <= D: the rotary width). Kernel, launcher, Tensor plumbing and
// registration; the checks the entry point leaves to the backend are here.
//
// One thread per rotated pair (or copied feature past a partial rotary width), so consecutive threads read consecutive
// cos/sin entries and (for either pairing) neighbouring x. Positions outside the table are not checked on the host,
// which would need a device-to-host sync per call: the kernel writes NaN for them instead, so the mistake cannot pass
// silently.
#include <cstdint>

#include "titan/core/dtype.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/rope.h"

namespace titan::ops::cuda {
namespace {

struct RopeShape {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  int64_t rotary_dim = 0;  // the first rotary_dim features of a head rotate; the rest are copied
  int64_t max_positions = 0;
};

template <typename T>
__global__ void rope(T* __restrict__ out, const T* __restrict__ x, const float* __restrict__ cos,
                     const float* __restrict__ sin, const void* __restrict__ positions, int position_bytes,
                     RopeShape shape, bool interleaved, float sign) {
  // Per row (token, head): rotary_dim / 2 rotated pairs, then head_dim - rotary_dim copied features.
  const int64_t half = shape.rotary_dim / 2;
  const int64_t per_row = half + shape.head_dim - shape.rotary_dim;
  const int64_t items = shape.batch * shape.seq * shape.heads * per_row;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < items;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = p % per_row;
    const int64_t row = p / per_row;  // token * heads + head
    if (i >= half) {
      const int64_t feature = row * shape.head_dim + shape.rotary_dim + (i - half);
      out[feature] = x[feature];
      continue;
    }
    const int64_t token = row / shape.heads;
    int64_t position = token % shape.seq;
    if (position_bytes == 8) {
      position = static_cast<const int64_t*>(positions)[token];
    } else if (position_bytes == 4) {
      position = static_cast<const int32_t*>(positions)[token];
    }
    const int64_t first = row * shape.head_dim + (interleaved ? 2 * i : i);
    const int64_t second = first + (interleaved ? 1 : half);
    if (position < 0 || position >= shape.max_positions) {
      store_f32(out, first, NAN);
      store_f32(out, second, NAN);
      continue;
    }
    const float c = cos[position * half + i];
    const float s = sign * sin[position * half + i];
    const float x0 = load_f32(x, first), x1 = load_f32(x, second);
    store_f32(out, first, x0 * c - x1 * s);
    store_f32(out, second, x0 * s + x1 * c);
  }
}

// positions: [B, S] of `position_bytes` (4: i32, 8: i64) per entry, or null
// for 0..S-1 in every sequence. A position outside the table cannot be
// reported from the device without a sync, so its token's output is NaN.
// interleaved pairs (2i, 2i+1); otherwise halves (i, i + R/2) of the first R =
// rotary_dim features, the rest copied. inverse rotates by -angle.
cudaError_t launch_rope(DType dtype, void* out, const void* x, const float* cos, const float* sin,
                        const void* positions, int position_bytes, const RopeShape& shape, bool interleaved,
                        bool inverse, cudaStream_t stream) {
  const int64_t items = shape.batch * shape.seq * shape.heads * (shape.head_dim - shape.rotary_dim / 2);
  if (items == 0) return cudaSuccess;
  const float sign = inverse ? -1.0f : 1.0f;
  if (positions == nullptr) position_bytes = 0;
  if (dtype == DType::bf16) {
    rope<<<grid_for(items, kThreads), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out),
                                                             static_cast<const __nv_bfloat16*>(x), cos, sin, positions,
                                                             position_bytes, shape, interleaved, sign);
  } else {
    rope<<<grid_for(items, kThreads), kThreads, 0, stream>>>(static_cast<float*>(out), static_cast<const float*>(x),
                                                             cos, sin, positions, position_bytes, shape, interleaved,
                                                             sign);
  }
  return cudaGetLastError();
}

void rope_kernel(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
                 RopeStyle style, bool inverse) {
  if (x.dtype() != DType::f32 && x.dtype() != DType::bf16) unsupported_dtype("rope", x.device(), x.dtype());
  for (const Tensor* table : {&cos, &sin}) {
    TITAN_CHECK(
        table->dtype() == DType::f32 && table->is_contiguous() && table->device() == x.device() && table->dim() == 2 &&
            table->size(1) == cos.size(1) && table->size(1) * 2 <= x.size(3) && table->size(0) == cos.size(0),
        "rope: the cos/sin table must be contiguous f32 [max_positions, <= {}] on {}, got {} {} on {}", x.size(3) / 2,
        x.device().str(), dtype_name(table->dtype()), shape_str(table->shape()), table->device().str());
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
  shape.rotary_dim = cos.size(1) * 2;
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
