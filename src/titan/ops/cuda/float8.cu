// CUDA float8 casts and the scaled GEMM's unscaling (ops/float8.h), the
// arithmetic of the CPU kernels (ops/cpu/kernels/float8.cpp) so that the
// values match them bit for bit: x * scale in f32, saturation, nearest-even
// onto the fp8 grid (rintf), stored as bf16. The GEMM itself is the bf16
// cuBLASLt GEMM of those values, as on the CPU: an emulation that is exact
// but not yet fp8 speed (cuBLASLt's FP8 matmul with scale pointers is not
// wired in; docs/float8.md). Written and compiled without a GPU: its tests
// (tests/ops/float8_test.cpp's CudaFloat8) skip here.
//
// Kept simple: amaxes by one block per row (axis 1) or one thread per column
// (axis 0), a tensor's amax by a second one-block pass over its row maxima,
// one thread per MX block; max is order-independent, so results do not depend
// on the launch shape.
#include <cuda_bf16.h>

#include <cstdint>
#include <span>

#include "titan/core/tensor.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/float_dtype.h"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/float8.h"

namespace titan::ops::cuda {
namespace float8_device {

constexpr int kThreads = 256;

struct Grid {
  float max;
  int mantissa_bits, min_exponent, max_exponent;
};

Grid grid_of(Float8Format format) {
  return format == Float8Format::e4m3 ? Grid{448.0f, 3, -6, 8} : Grid{57344.0f, 2, -14, 15};
}

__device__ __forceinline__ float to_grid(float v, Grid g) {
  const float clamped = fminf(fmaxf(v, -g.max), g.max);
  if (clamped != clamped) return clamped;  // fminf/fmaxf drop a NaN: keep it
  const int exponent = max(static_cast<int>((__float_as_uint(clamped) >> 23) & 0xffu) - 127, g.min_exponent);
  const int quantum_exponent = exponent - g.mantissa_bits;
  const float units = rintf(__fmul_rn(clamped, __uint_as_float(static_cast<unsigned>(127 - quantum_exponent) << 23)));
  return copysignf(__fmul_rn(units, __uint_as_float(static_cast<unsigned>(quantum_exponent + 127) << 23)), clamped);
}

__device__ __forceinline__ float scale_from_amax(float amax, Grid g, bool power_of_two) {
  if (amax != amax) return amax;
  auto scale = static_cast<float>(static_cast<double>(g.max) / fmax(static_cast<double>(amax), 1e-12));
  if (power_of_two && isfinite(scale)) {
    int exponent;
    frexpf(scale, &exponent);
    scale = ldexpf(1.0f, exponent - 1);
  }
  return scale;
}

template <typename T>
__global__ void row_amax(float* out, const T* x, int64_t rows, int64_t cols) {
  __shared__ float scratch[kWarpSize];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float m = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = nan_max(m, fabsf(load_f32(x, r * cols + c)));
    m = block_max(m, scratch);
    if (threadIdx.x == 0) out[r] = m;
  }
}

template <typename T>
__global__ void col_amax(float* out, const T* x, int64_t rows, int64_t cols) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float m = 0.0f;
    for (int64_t r = 0; r < rows; ++r) m = nan_max(m, fabsf(load_f32(x, r * cols + c)));
    out[c] = m;
  }
}

// In place: amaxes -> scales. With `whole`, first the max of all `n` (one block).
__global__ void amax_to_scales(float* scales, int64_t n, bool whole, Grid g, bool power_of_two) {
  __shared__ float scratch[kWarpSize];
  if (whole) {
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = nan_max(m, scales[i]);
    m = block_max(m, scratch);
    if (threadIdx.x == 0) scales[0] = scale_from_amax(m, g, power_of_two);
    return;
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) scales[i] = scale_from_amax(scales[i], g, power_of_two);
}

// scale_mode: 0 one scale, 1 per row, 2 per column. With `dequantize` each
// value is divided by its scale again (exact for power-of-two scales).
template <typename T>
__global__ void cast_scaled(__nv_bfloat16* values, const T* x, const float* scales, int64_t rows, int64_t cols,
                            int scale_mode, bool dequantize, Grid g) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float s = scales[scale_mode == 0 ? 0 : (scale_mode == 1 ? i / cols : i % cols)];
    const float on_grid = to_grid(__fmul_rn(load_f32(x, i), s), g);
    values[i] = __float2bfloat16_rn(dequantize ? __fmul_rn(on_grid, __frcp_rn(s)) : on_grid);
  }
}

// A block's e8m0 exponent (unbiased; 128 for NaN or inf), floor or rceil,
// as the CPU's mx_exponent.
__device__ __forceinline__ int mx_exponent(float amax, Grid g, bool rceil) {
  if (!isfinite(amax)) return 128;
  if (rceil) {
    const unsigned bits = __float_as_uint(__fmul_rn(amax, 1.0f / g.max));
    const int biased = static_cast<int>((bits >> 23) & 0xffu);
    const unsigned mantissa = bits & 0x7fffffu;
    return biased + (biased == 0 ? (mantissa > 0x400000u ? 1 : 0) : (mantissa != 0 ? 1 : 0)) - 127;
  }
  const int floor_log2 = static_cast<int>((__float_as_uint(amax) >> 23) & 0xffu) - 127;
  return min(max(floor_log2 - g.max_exponent, -127), 128);
}
__device__ __forceinline__ float mx_inverse(int exponent) {
  return exponent != 128 ? __uint_as_float(static_cast<unsigned>(127 - exponent) << 23) : __int_as_float(0x7fffffff);
}
__device__ __forceinline__ float mx_scale(int exponent) {
  return exponent != 128 ? ldexpf(1.0f, exponent) : __int_as_float(0x7fffffff);
}

template <typename T>
__global__ void cast_mx(__nv_bfloat16* values, uint8_t* exponents, const T* x, int64_t rows, int64_t cols, int64_t axis,
                        Grid g, bool rceil) {
  const int64_t blocks = rows * cols / kMxBlockSize;
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // The block's first element and stride, numbered as the CPU numbers them.
    const int64_t first = axis == 1 ? b * kMxBlockSize : (b / cols) * kMxBlockSize * cols + b % cols;
    const int64_t stride = axis == 1 ? 1 : cols;
    float amax = 0.0f;
    for (int i = 0; i < kMxBlockSize; ++i) amax = nan_max(amax, fabsf(load_f32(x, first + i * stride)));
    const int exponent = mx_exponent(amax, g, rceil);
    exponents[b] = static_cast<uint8_t>(exponent + 127);
    const float inverse = mx_inverse(exponent), scale = mx_scale(exponent);
    for (int i = 0; i < kMxBlockSize; ++i) {
      const int64_t at = first + i * stride;
      values[at] = __float2bfloat16_rn(__fmul_rn(to_grid(__fmul_rn(load_f32(x, at), inverse), g), scale));
    }
  }
}

template <typename T>
void cast(const Tensor& values, const Tensor& scale, const T* x, const Float8Cast& c, int64_t axis, bool dequantize) {
  const int64_t rows = values.size(0), cols = values.size(1);
  const Grid g = grid_of(c.format);
  cudaStream_t stream = current_stream();
  auto* out = static_cast<__nv_bfloat16*>(values.data_ptr());
  const unsigned elementwise = grid_for(rows * cols, kThreads);
  if (c.scaling == Float8Scaling::mx_block) {
    cast_mx<<<grid_for(rows * cols / kMxBlockSize, kThreads), kThreads, 0, stream>>>(
        out, static_cast<uint8_t*>(scale.data_ptr()), x, rows, cols, axis, g, c.mx_rounding == MxScaleRounding::rceil);
    TITAN_CUDA_CHECK(cudaGetLastError());
    return;
  }
  float* scales = scale.data<float>();
  if (c.scaling == Float8Scaling::tensorwise) {
    // Row maxima into a scratch buffer, then the one scale.
    const Tensor maxima = Tensor::empty({rows}, DType::f32, values.device());
    row_amax<<<grid_for(rows, 1), kThreads, 0, stream>>>(maxima.data<float>(), x, rows, cols);
    amax_to_scales<<<1, kThreads, 0, stream>>>(maxima.data<float>(), rows, true, g, c.power_of_two_scale);
    TITAN_CUDA_CHECK(cudaMemcpyAsync(scales, maxima.data<float>(), sizeof(float), cudaMemcpyDeviceToDevice, stream));
    cast_scaled<<<elementwise, kThreads, 0, stream>>>(out, x, scales, rows, cols, 0, dequantize, g);
  } else if (axis == 1) {
    row_amax<<<grid_for(rows, 1), kThreads, 0, stream>>>(scales, x, rows, cols);
    amax_to_scales<<<1, kThreads, 0, stream>>>(scales, rows, false, g, c.power_of_two_scale);
    cast_scaled<<<elementwise, kThreads, 0, stream>>>(out, x, scales, rows, cols, 1, dequantize, g);
  } else {
    col_amax<<<grid_for(cols, kThreads), kThreads, 0, stream>>>(scales, x, rows, cols);
    amax_to_scales<<<1, kThreads, 0, stream>>>(scales, cols, false, g, c.power_of_two_scale);
    cast_scaled<<<elementwise, kThreads, 0, stream>>>(out, x, scales, rows, cols, 2, dequantize, g);
  }
  TITAN_CUDA_CHECK(cudaGetLastError());
}

void float8_cast_kernel(const Tensor& values, const Tensor& scale, const Tensor& x, const Float8Cast& c, int64_t axis,
                        bool dequantize) {
  if (x.numel() == 0) return;
  if (is_bf16("float8_cast", x)) {
    cast(values, scale, static_cast<const __nv_bfloat16*>(x.data_ptr()), c, axis, dequantize);
  } else {
    cast(values, scale, x.data<float>(), c, axis, dequantize);
  }
}

// Fake quantization per group down dim 0 (ops::float8_fake_quantize_groups):
// one thread per group and column, which finds its group's first row from the
// counts and walks its segments (the whole group, or 32 rows at a time for MX).
template <typename T>
__global__ void fake_quantize_groups(__nv_bfloat16* values, const T* x, const int64_t* counts, int64_t groups,
                                     int64_t rows, int64_t cols, Grid g, bool mx, bool rceil) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < groups * cols;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t group = i / cols, c = i % cols;
    int64_t first = 0;
    for (int64_t e = 0; e < group; ++e) first += counts[e] > 0 ? counts[e] : 0;
    const int64_t last = min(first + (counts[group] > 0 ? counts[group] : 0), rows);
    const int64_t step = mx ? kMxBlockSize : (last > first ? last - first : 1);
    for (int64_t begin = first; begin < last; begin += step) {
      const int64_t end = min(begin + step, last);
      float amax = 0.0f;
      for (int64_t r = begin; r < end; ++r) amax = nan_max(amax, fabsf(load_f32(x, r * cols + c)));
      float to_fp8, from_fp8;
      if (mx) {
        const int exponent = mx_exponent(amax, g, rceil);
        to_fp8 = mx_inverse(exponent);
        from_fp8 = mx_scale(exponent);
      } else {
        to_fp8 = scale_from_amax(amax, g, true);
        from_fp8 = __fdiv_rn(1.0f, to_fp8);
      }
      for (int64_t r = begin; r < end; ++r) {
        values[r * cols + c] =
            __float2bfloat16_rn(__fmul_rn(to_grid(__fmul_rn(load_f32(x, r * cols + c), to_fp8), g), from_fp8));
      }
    }
  }
}

void float8_fake_quantize_groups_kernel(const Tensor& values, const Tensor& x, const Tensor& counts,
                                        const Float8Cast& c) {
  const int64_t rows = x.size(0), cols = x.size(1), groups = counts.numel();
  if (x.numel() == 0 || groups == 0) return;
  const Grid g = grid_of(c.format);
  const bool mx = c.scaling == Float8Scaling::mx_block, rceil = c.mx_rounding == MxScaleRounding::rceil;
  auto* out = static_cast<__nv_bfloat16*>(values.data_ptr());
  const unsigned blocks = grid_for(groups * cols, kThreads);
  cudaStream_t stream = current_stream();
  if (is_bf16("float8_fake_quantize_groups", x)) {
    fake_quantize_groups<<<blocks, kThreads, 0, stream>>>(out, static_cast<const __nv_bfloat16*>(x.data_ptr()),
                                                          counts.data<int64_t>(), groups, rows, cols, g, mx, rceil);
  } else {
    fake_quantize_groups<<<blocks, kThreads, 0, stream>>>(out, x.data<float>(), counts.data<int64_t>(), groups, rows,
                                                          cols, g, mx, rceil);
  }
  TITAN_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
__global__ void unscale(T* out, const float* acc, const float* a_scale, int64_t a_count, const float* b_scale,
                        int64_t b_count, int64_t rows, int64_t cols) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * cols;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float row = a_scale == nullptr ? 1.0f : 1.0f / a_scale[a_count == 1 ? 0 : i / cols];
    const float col = b_scale == nullptr ? 1.0f : 1.0f / b_scale[b_count == 1 ? 0 : i % cols];
    store_f32(out, i, __fmul_rn(__fmul_rn(acc[i], row), col));
  }
}

void float8_unscale_kernel(const Tensor& out, const Tensor& acc, const Tensor& a_scale, const Tensor& b_scale) {
  const int64_t rows = acc.size(0), cols = acc.size(1);
  if (rows * cols == 0) return;
  const float* a = a_scale.defined() ? a_scale.data<float>() : nullptr;
  const float* b = b_scale.defined() ? b_scale.data<float>() : nullptr;
  const int64_t a_count = a_scale.defined() ? a_scale.numel() : 0, b_count = b_scale.defined() ? b_scale.numel() : 0;
  cudaStream_t stream = current_stream();
  const unsigned grid = grid_for(rows * cols, kThreads);
  if (is_bf16("float8_scaled_mm", out)) {
    unscale<<<grid, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out.data_ptr()), acc.data<float>(), a, a_count,
                                           b, b_count, rows, cols);
  } else {
    unscale<<<grid, kThreads, 0, stream>>>(out.data<float>(), acc.data<float>(), a, a_count, b, b_count, rows, cols);
  }
  TITAN_CUDA_CHECK(cudaGetLastError());
}

// FSDP's float8 all-gather: one block per part's amax; the codes from the
// values on the grid, decoded back exactly.
void float8_amaxes_kernel(const Tensor& out, std::span<const Tensor> parts) {
  cudaStream_t stream = current_stream();
  for (size_t i = 0; i < parts.size(); ++i) {
    float* slot = out.data<float>() + i;
    const int64_t n = parts[i].numel();
    if (n == 0) {
      TITAN_CUDA_CHECK(cudaMemsetAsync(slot, 0, sizeof(float), stream));
    } else if (is_bf16("float8_amaxes", parts[i])) {
      row_amax<<<1, kThreads, 0, stream>>>(slot, static_cast<const __nv_bfloat16*>(parts[i].data_ptr()), 1, n);
    } else {
      row_amax<<<1, kThreads, 0, stream>>>(slot, parts[i].data<float>(), 1, n);
    }
  }
  TITAN_CUDA_CHECK(cudaGetLastError());
}

void float8_scales_kernel(const Tensor& scales, const Tensor& amaxes, Float8Format format) {
  cudaStream_t stream = current_stream();
  const int64_t n = amaxes.numel();
  TITAN_CUDA_CHECK(
      cudaMemcpyAsync(scales.data<float>(), amaxes.data<float>(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  amax_to_scales<<<1, kThreads, 0, stream>>>(scales.data<float>(), n, false, grid_of(format), false);
  TITAN_CUDA_CHECK(cudaGetLastError());
}

// The OCP code of a value on the grid (finite, or NaN): sign, biased exponent,
// the mantissa's top bits; below the smallest normal, the subnormal count.
__device__ __forceinline__ uint8_t grid_code(float v, Grid g) {
  const unsigned bits = __float_as_uint(v);
  const unsigned sign = (bits >> 31) << 7;
  if (v != v) return static_cast<uint8_t>((g.mantissa_bits == 3 ? 0x7fu : 0x7eu) | sign);  // core/dtype.cpp's NaN codes
  const float magnitude = fabsf(v);
  const int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127;
  const int bias = -g.min_exponent + 1;  // 7 (e4m3) or 15 (e5m2)
  if (magnitude == 0.0f) return static_cast<uint8_t>(sign);
  if (exponent < g.min_exponent) {  // subnormal: magnitude / 2^(min_exponent - mantissa_bits)
    return static_cast<uint8_t>(sign | static_cast<unsigned>(ldexpf(magnitude, g.mantissa_bits - g.min_exponent)));
  }
  const unsigned mantissa = (bits & 0x7fffffu) >> (23 - g.mantissa_bits);
  return static_cast<uint8_t>(sign | (static_cast<unsigned>(exponent + bias) << g.mantissa_bits) | mantissa);
}

template <typename T>
__global__ void encode(uint8_t* codes, const T* x, const float* scales, int64_t index, int64_t n, Grid g) {
  const float s = scales[index];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    codes[i] = grid_code(to_grid(__fmul_rn(load_f32(x, i), s), g), g);
  }
}

__device__ __forceinline__ float code_value(uint8_t code, Grid g) {
  const float sign = (code & 0x80u) != 0 ? -1.0f : 1.0f;
  const int exponent_field = (code & 0x7fu) >> g.mantissa_bits;
  const int mantissa = code & ((1 << g.mantissa_bits) - 1);
  const int bias = -g.min_exponent + 1;
  if (g.mantissa_bits == 3 && (code & 0x7fu) == 0x7fu) return __int_as_float(0x7fffffff);  // e4m3's NaN
  if (g.mantissa_bits == 2 && exponent_field == 31) {
    return mantissa == 0 ? sign * __int_as_float(0x7f800000) : __int_as_float(0x7fffffff);  // e5m2's inf and NaN
  }
  if (exponent_field == 0) return sign * ldexpf(static_cast<float>(mantissa), g.min_exponent - g.mantissa_bits);
  return sign * ldexpf(static_cast<float>((1 << g.mantissa_bits) | mantissa), exponent_field - bias - g.mantissa_bits);
}

template <typename T>
__global__ void decode(T* values, const uint8_t* codes, int64_t n, Grid g) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    store_f32(values, i, code_value(codes[i], g));
  }
}

Grid grid_of_codes(const Tensor& codes) { return grid_of(float8_format_of(codes.dtype())); }

void float8_encode_kernel(const Tensor& codes, const Tensor& x, const Tensor& scales, int64_t index) {
  const int64_t n = x.numel();
  auto* out = static_cast<uint8_t*>(codes.data_ptr());
  cudaStream_t stream = current_stream();
  if (is_bf16("float8_encode", x)) {
    encode<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, static_cast<const __nv_bfloat16*>(x.data_ptr()),
                                                           scales.data<float>(), index, n, grid_of_codes(codes));
  } else {
    encode<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, x.data<float>(), scales.data<float>(), index, n,
                                                           grid_of_codes(codes));
  }
  TITAN_CUDA_CHECK(cudaGetLastError());
}

void float8_decode_kernel(const Tensor& values, const Tensor& codes) {
  const int64_t n = codes.numel();
  const auto* in = static_cast<const uint8_t*>(codes.data_ptr());
  cudaStream_t stream = current_stream();
  if (is_bf16("float8_decode", values)) {
    decode<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(values.data_ptr()), in, n,
                                                           grid_of_codes(codes));
  } else {
    decode<<<grid_for(n, kThreads), kThreads, 0, stream>>>(values.data<float>(), in, n, grid_of_codes(codes));
  }
  TITAN_CUDA_CHECK(cudaGetLastError());
}

// codes = values / 2^(e - 127), one thread per element: exact, as MX values are codes times their block's scale.
__global__ void mx_codes(uint8_t* codes, const __nv_bfloat16* values, const uint8_t* exponents, int64_t n, Grid g) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float inverse = mx_inverse(static_cast<int>(exponents[i / kMxBlockSize]) - 127);
    codes[i] = grid_code(__fmul_rn(__bfloat162float(values[i]), inverse), g);
  }
}

void float8_mx_codes_kernel(const Tensor& codes, const Tensor& values, const Tensor& exponents) {
  const int64_t n = values.numel();
  mx_codes<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      static_cast<uint8_t*>(codes.data_ptr()), static_cast<const __nv_bfloat16*>(values.data_ptr()),
      exponents.data<uint8_t>(), n, grid_of_codes(codes));
  TITAN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace float8_device

void register_float8() {
  float8_cast_kernels.set_kernel(DeviceType::cuda, float8_device::float8_cast_kernel);
  float8_unscale_kernels.set_kernel(DeviceType::cuda, float8_device::float8_unscale_kernel);
  float8_fake_quantize_groups_kernels.set_kernel(DeviceType::cuda, float8_device::float8_fake_quantize_groups_kernel);
  float8_amaxes_kernels.set_kernel(DeviceType::cuda, float8_device::float8_amaxes_kernel);
  float8_scales_kernels.set_kernel(DeviceType::cuda, float8_device::float8_scales_kernel);
  float8_encode_kernels.set_kernel(DeviceType::cuda, float8_device::float8_encode_kernel);
  float8_decode_kernels.set_kernel(DeviceType::cuda, float8_device::float8_decode_kernel);
  float8_mx_codes_kernels.set_kernel(DeviceType::cuda, float8_device::float8_mx_codes_kernel);
}

}  // namespace titan::ops::cuda
