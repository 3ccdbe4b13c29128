// CUDA copies (any strides, any dtype pair), fills (any strides) and host <->
// device transfers: kernels, launchers, Tensor plumbing and registration.
//
// Layouts are first reduced to as few dims as possible (size-1 dims dropped,
// dims contiguous in both tensors merged), so the usual cases become one flat
// loop and only true permutations pay for index arithmetic. Conversions are
// ports of core/dtype.cpp's bit-level code, not CUDA's intrinsics, so every
// dtype pair (NaN payloads, fp8 saturation, subnormals included) gives exactly
// the CPU copy's bits. Element offsets are recomputed from the flat index with
// one div/mod per (merged) dim; 32-bit indices are used when they suffice
// because 64-bit division is several times slower on the GPU.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "titan/core/copy.h"
#include "titan/core/dtype.h"
#include "titan/core/tensor.h"
#include "titan/ops/cuda/convert.cuh"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

// An n-dimensional index space walked in row-major order, with the element
// strides of the destination and the source at each dim (fills ignore `src`).
// Callers first merge dims that are contiguous in both, so a few dims suffice.
constexpr int kMaxCopyDims = 8;
struct CopyLayout {
  int dims = 0;
  int64_t sizes[kMaxCopyDims] = {};
  int64_t dst_strides[kMaxCopyDims] = {};
  int64_t src_strides[kMaxCopyDims] = {};
};

// ---- scalar conversions (mirrors of core/dtype.cpp) ------------------------

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ uint16_t f32_to_bf16_bits(float value) {
  uint32_t word = __float_as_uint(value);
  if ((word & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((word >> 16) | 0x0040u);
  word += 0x7fffu + ((word >> 16) & 1u);
  return static_cast<uint16_t>(word >> 16);
}

struct MiniFloat {
  int exponent_bits;
  int mantissa_bits;
  bool has_infinity;
  bool saturate;
  uint32_t nan_code;
  float max_finite;
};
// Functions, not constants: host constexpr objects cannot be used in device code.
__device__ __forceinline__ MiniFloat f16_format() { return {5, 10, true, false, 0x7e00u, 65504.0f}; }
__device__ __forceinline__ MiniFloat e4m3_format() { return {4, 3, false, true, 0x7fu, 448.0f}; }
__device__ __forceinline__ MiniFloat e5m2_format() { return {5, 2, true, false, 0x7eu, 57344.0f}; }

// Every step is exact (scaling by powers of two, rint) except the one
// rounding, so this agrees with the host version bit for bit.
__device__ uint32_t encode_minifloat(MiniFloat format, float value) {
  const int bias = (1 << (format.exponent_bits - 1)) - 1;
  const uint32_t sign = signbit(value) ? 1u << (format.exponent_bits + format.mantissa_bits) : 0u;
  if (isnan(value)) return format.nan_code | sign;
  const float magnitude = fabsf(value);
  const int min_exponent = 1 - bias;
  int exponent = 0;
  frexpf(magnitude, &exponent);
  exponent -= 1;
  if (magnitude == 0.0f || exponent < min_exponent) exponent = min_exponent;
  const float quantum = ldexpf(1.0f, exponent - format.mantissa_bits);
  float rounded = rintf(magnitude / quantum) * quantum;
  if (isinf(magnitude) || rounded > format.max_finite) {
    const uint32_t infinity = ((1u << format.exponent_bits) - 1) << format.mantissa_bits;
    if (format.has_infinity && (isinf(magnitude) || !format.saturate)) return sign | infinity;
    rounded = format.max_finite;
  }
  if (rounded == 0.0f) return sign;
  int rounded_exponent = 0;
  const float fraction = frexpf(rounded, &rounded_exponent);
  rounded_exponent -= 1;
  if (rounded_exponent < min_exponent) {
    return sign | static_cast<uint32_t>(ldexpf(rounded, format.mantissa_bits - min_exponent));
  }
  const auto biased = static_cast<uint32_t>(rounded_exponent + bias);
  const auto mantissa = static_cast<uint32_t>(ldexpf(fraction * 2.0f - 1.0f, format.mantissa_bits));
  return sign | (biased << format.mantissa_bits) | mantissa;
}

__device__ float decode_minifloat(MiniFloat format, uint32_t bits) {
  const int bias = (1 << (format.exponent_bits - 1)) - 1;
  const uint32_t mantissa_mask = (1u << format.mantissa_bits) - 1;
  const uint32_t exponent_mask = (1u << format.exponent_bits) - 1;
  const bool negative = (bits >> (format.exponent_bits + format.mantissa_bits)) & 1u;
  const uint32_t biased = (bits >> format.mantissa_bits) & exponent_mask;
  const uint32_t mantissa = bits & mantissa_mask;
  const float quiet_nan = __uint_as_float(0x7fc00000u);
  float magnitude;
  if (biased == exponent_mask && format.has_infinity) {
    magnitude = mantissa ? quiet_nan : __uint_as_float(0x7f800000u);
  } else if (biased == exponent_mask && mantissa == mantissa_mask && !format.has_infinity) {
    magnitude = quiet_nan;
  } else if (biased == 0) {
    magnitude = ldexpf(static_cast<float>(mantissa), 1 - bias - format.mantissa_bits);
  } else {
    magnitude =
        ldexpf(1.0f + ldexpf(static_cast<float>(mantissa), -format.mantissa_bits), static_cast<int>(biased) - bias);
  }
  // A sign-bit flip, which unlike negation is defined for NaN too.
  return negative ? __uint_as_float(__float_as_uint(magnitude) | 0x80000000u) : magnitude;
}

__device__ __forceinline__ bool is_float_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f8e4m3 ||
         dtype == DType::f8e5m2;
}

// Float formats convert through f32 without leaving it: every float format
// widens to f32 exactly, and GPU f32 <-> f64 conversions may canonicalise NaNs
// where the CPU's keep sign and payload.
__device__ float load_float(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::bf16:
      return bf16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::f16:
      return decode_minifloat(f16_format(), static_cast<const uint16_t*>(base)[i]);
    case DType::f8e4m3:
      return decode_minifloat(e4m3_format(), static_cast<const uint8_t*>(base)[i]);
    case DType::f8e5m2:
      return decode_minifloat(e5m2_format(), static_cast<const uint8_t*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

__device__ void store_float(void* base, DType dtype, int64_t i, float value) {
  switch (dtype) {
    case DType::bf16:
      static_cast<uint16_t*>(base)[i] = f32_to_bf16_bits(value);
      break;
    case DType::f16:
      static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(encode_minifloat(f16_format(), value));
      break;
    case DType::f8e4m3:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(encode_minifloat(e4m3_format(), value));
      break;
    case DType::f8e5m2:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(encode_minifloat(e5m2_format(), value));
      break;
    default:
      static_cast<float*>(base)[i] = value;
      break;
  }
}

// Element i widened to double, as load_element: exact but for i64 beyond 2^53.
__device__ double load_as_double(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::i32:
      return static_cast<const int32_t*>(base)[i];
    case DType::i64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::u8:
      return static_cast<const uint8_t*>(base)[i];
    default:
      return load_float(base, dtype, i);
  }
}

// As store_element: floats narrow to f32 first, then round once to the
// format; integers truncate.
__device__ void store_from_double(void* base, DType dtype, int64_t i, double value) {
  switch (dtype) {
    case DType::i32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(value);
      break;
    case DType::i64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(value);
      break;
    case DType::u8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(value);
      break;
    default:
      store_float(base, dtype, i, static_cast<float>(value));
      break;
  }
}

__device__ __forceinline__ void convert_element(void* dst, DType dst_dtype, int64_t d, const void* src, DType src_dtype,
                                                int64_t s) {
  if (is_float_dtype(dst_dtype) && is_float_dtype(src_dtype)) {
    store_float(dst, dst_dtype, d, load_float(src, src_dtype, s));
  } else {
    store_from_double(dst, dst_dtype, d, load_as_double(src, src_dtype, s));
  }
}

// ---- kernels --------------------------------------------------------------

#define TITAN_GRID_STRIDE(Index, i, n)                                               \
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<Index>(gridDim.x) * blockDim.x)

template <typename Index>
__device__ __forceinline__ void element_offsets(const CopyLayout& layout, Index flat, int64_t& dst, int64_t& src) {
  dst = 0;
  src = 0;
  for (int d = layout.dims - 1; d >= 0; --d) {
    const auto size = static_cast<Index>(layout.sizes[d]);
    const Index index = flat % size;
    flat /= size;
    dst += static_cast<int64_t>(index) * layout.dst_strides[d];
    src += static_cast<int64_t>(index) * layout.src_strides[d];
  }
}

__global__ void f32_to_bf16(uint16_t* dst, const float* src, int64_t n) {
  TITAN_GRID_STRIDE(int64_t, i, n) dst[i] = f32_to_bf16_bits(src[i]);
}

__global__ void bf16_to_f32(float* dst, const uint16_t* src, int64_t n) {
  TITAN_GRID_STRIDE(int64_t, i, n) dst[i] = bf16_bits_to_f32(src[i]);
}

template <typename Index>
__global__ void strided_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, const CopyLayout layout,
                                Index n) {
  TITAN_GRID_STRIDE(Index, i, n) {
    int64_t d = 0, s = 0;
    element_offsets(layout, i, d, s);
    convert_element(dst, dst_dtype, d, src, src_dtype, s);
  }
}

// Same dtype: the bits move unchanged (T is an unsigned word of the element size).
template <typename T, typename Index>
__global__ void strided_move(T* dst, const T* src, const CopyLayout layout, Index n) {
  TITAN_GRID_STRIDE(Index, i, n) {
    int64_t d = 0, s = 0;
    element_offsets(layout, i, d, s);
    dst[d] = src[s];
  }
}

template <typename T>
__global__ void fill(T* dst, T value, int64_t n) {
  TITAN_GRID_STRIDE(int64_t, i, n) dst[i] = value;
}

template <typename T, typename Index>
__global__ void strided_fill(T* dst, T value, const CopyLayout layout, Index n) {
  TITAN_GRID_STRIDE(Index, i, n) {
    int64_t d = 0, s = 0;
    element_offsets(layout, i, d, s);
    dst[d] = value;
  }
}

#undef TITAN_GRID_STRIDE

int64_t layout_numel(const CopyLayout& layout) {
  int64_t n = 1;
  for (int d = 0; d < layout.dims; ++d) n *= layout.sizes[d];
  return n;
}

// Calls launch(Index{}) with the narrowest index type that covers n.
template <typename Launch>
void with_index_type(int64_t n, Launch&& launch) {
  if (n <= static_cast<int64_t>(UINT32_MAX) - 2 * 65535 * kThreads) {
    launch(uint32_t{});
  } else {
    launch(int64_t{});
  }
}

template <typename T>
void launch_strided_move(void* dst, const void* src, const CopyLayout& layout, int64_t n, cudaStream_t stream) {
  with_index_type(n, [&](auto index) {
    using Index = decltype(index);
    strided_move<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src),
                                                                 layout, static_cast<Index>(n));
  });
}

template <typename T>
void launch_strided_fill(void* dst, T value, const CopyLayout& layout, int64_t n, cudaStream_t stream) {
  with_index_type(n, [&](auto index) {
    using Index = decltype(index);
    strided_fill<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(dst), value, layout,
                                                                 static_cast<Index>(n));
  });
}

// dst[i] = src[i] converted, through `layout` (any strides; launch_convert is the
// contiguous case).
cudaError_t launch_strided_copy(void* dst, DType dst_dtype, const void* src, DType src_dtype, const CopyLayout& layout,
                                cudaStream_t stream) {
  const int64_t n = layout_numel(layout);
  if (n == 0) return cudaSuccess;
  if (dst_dtype == src_dtype) {
    switch (dtype_size(dst_dtype)) {
      case 1:
        launch_strided_move<uint8_t>(dst, src, layout, n, stream);
        break;
      case 2:
        launch_strided_move<uint16_t>(dst, src, layout, n, stream);
        break;
      case 4:
        launch_strided_move<uint32_t>(dst, src, layout, n, stream);
        break;
      default:
        launch_strided_move<uint64_t>(dst, src, layout, n, stream);
        break;
    }
    return cudaGetLastError();
  }
  with_index_type(n, [&](auto index) {
    using Index = decltype(index);
    strided_convert<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, dst_dtype, src, src_dtype, layout,
                                                                    static_cast<Index>(n));
  });
  return cudaGetLastError();
}

cudaError_t launch_f32_to_bf16(void* dst, const void* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  f32_to_bf16<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<uint16_t*>(dst),
                                                              static_cast<const float*>(src), n);
  return cudaGetLastError();
}

cudaError_t launch_bf16_to_f32(void* dst, const void* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  bf16_to_f32<<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<float*>(dst),
                                                              static_cast<const uint16_t*>(src), n);
  return cudaGetLastError();
}

// Fills n elements of element_size bytes (1, 2, 4 or 8) with the bit pattern in `bits`.
cudaError_t launch_fill_bits(void* dst, int element_size, uint64_t bits, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const unsigned grid = grid_for(n, kThreads);
  switch (element_size) {
    case 1:
      fill<<<grid, kThreads, 0, stream>>>(static_cast<uint8_t*>(dst), static_cast<uint8_t>(bits), n);
      break;
    case 2:
      fill<<<grid, kThreads, 0, stream>>>(static_cast<uint16_t*>(dst), static_cast<uint16_t>(bits), n);
      break;
    case 4:
      fill<<<grid, kThreads, 0, stream>>>(static_cast<uint32_t*>(dst), static_cast<uint32_t>(bits), n);
      break;
    default:
      fill<<<grid, kThreads, 0, stream>>>(static_cast<uint64_t*>(dst), bits, n);
      break;
  }
  return cudaGetLastError();
}

// The same through `layout`'s destination strides.
cudaError_t launch_strided_fill_bits(void* dst, int element_size, uint64_t bits, const CopyLayout& layout,
                                     cudaStream_t stream) {
  const int64_t n = layout_numel(layout);
  if (n == 0) return cudaSuccess;
  switch (element_size) {
    case 1:
      launch_strided_fill(dst, static_cast<uint8_t>(bits), layout, n, stream);
      break;
    case 2:
      launch_strided_fill(dst, static_cast<uint16_t>(bits), layout, n, stream);
      break;
    case 4:
      launch_strided_fill(dst, static_cast<uint32_t>(bits), layout, n, stream);
      break;
    default:
      launch_strided_fill(dst, bits, layout, n, stream);
      break;
  }
  return cudaGetLastError();
}

}  // namespace

// Declared in convert.cuh for the ops that store in another dtype (random.cu).
// Conversions are those of the CPU copy (core/dtype.cpp) bit for bit: through
// f32 with round-to-nearest-even for the float formats, truncation for ints;
// a same-dtype copy moves the bits unchanged.
cudaError_t launch_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (dst_dtype == src_dtype) {
    return cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dst_dtype), cudaMemcpyDeviceToDevice, stream);
  }
  if (dst_dtype == DType::bf16 && src_dtype == DType::f32) return launch_f32_to_bf16(dst, src, n, stream);
  if (dst_dtype == DType::f32 && src_dtype == DType::bf16) return launch_bf16_to_f32(dst, src, n, stream);
  CopyLayout layout;
  layout.dims = 1;
  layout.sizes[0] = n;
  layout.dst_strides[0] = layout.src_strides[0] = 1;
  return launch_strided_copy(dst, dst_dtype, src, src_dtype, layout, stream);
}

namespace {

// The row-major walk over dst's shape with dst's and src's strides, merged.
// `src` may be dst itself (fills).
CopyLayout merged_layout(const Tensor& dst, const Tensor& src) {
  std::vector<int64_t> sizes, dst_strides, src_strides;
  for (int64_t d = 0; d < dst.dim(); ++d) {
    const int64_t size = dst.size(d);
    if (size == 1) continue;
    if (!sizes.empty() && dst_strides.back() == dst.stride(d) * size && src_strides.back() == src.stride(d) * size) {
      sizes.back() *= size;
      dst_strides.back() = dst.stride(d);
      src_strides.back() = src.stride(d);
    } else {
      sizes.push_back(size);
      dst_strides.push_back(dst.stride(d));
      src_strides.push_back(src.stride(d));
    }
  }
  CopyLayout layout;
  if (sizes.empty()) {  // one element
    layout.dims = 1;
    layout.sizes[0] = layout.dst_strides[0] = layout.src_strides[0] = 1;
    return layout;
  }
  TITAN_CHECK(sizes.size() <= static_cast<size_t>(kMaxCopyDims),
              "copy on {}: shape {} (strides {} and {}) needs {} dims after merging; at most {} are supported",
              dst.device().str(), shape_str(dst.shape()), shape_str(dst.strides()), shape_str(src.strides()),
              sizes.size(), kMaxCopyDims);
  layout.dims = static_cast<int>(sizes.size());
  for (int d = 0; d < layout.dims; ++d) {
    layout.sizes[d] = sizes[static_cast<size_t>(d)];
    layout.dst_strides[d] = dst_strides[static_cast<size_t>(d)];
    layout.src_strides[d] = src_strides[static_cast<size_t>(d)];
  }
  return layout;
}

bool is_flat(const CopyLayout& layout) {
  return layout.dims == 1 && layout.dst_strides[0] == 1 && layout.src_strides[0] == 1;
}

void copy_kernel(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const CopyLayout layout = merged_layout(dst, src);
  if (is_flat(layout)) {
    TITAN_CUDA_CHECK(launch_convert(dst.data_ptr(), dst.dtype(), src.data_ptr(), src.dtype(), n, current_stream()));
  } else {
    TITAN_CUDA_CHECK(
        launch_strided_copy(dst.data_ptr(), dst.dtype(), src.data_ptr(), src.dtype(), layout, current_stream()));
  }
}

void fill_kernel(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  // Encode the value once on the host (the CPU rounding rules), then splat its bits.
  Tensor one = Tensor::full({1}, value, dst.dtype());
  uint64_t bits = 0;
  std::memcpy(&bits, one.data_ptr(), one.element_size());
  const int size = static_cast<int>(dst.element_size());
  const CopyLayout layout = merged_layout(dst, dst);
  if (is_flat(layout)) {
    TITAN_CUDA_CHECK(launch_fill_bits(dst.data_ptr(), size, bits, dst.numel(), current_stream()));
  } else {
    TITAN_CUDA_CHECK(launch_strided_fill_bits(dst.data_ptr(), size, bits, layout, current_stream()));
  }
}

// Both sides contiguous, same dtype (titan::copy_ stages anything else). The
// copy is ordered after the kernels already queued on the current stream, and
// waited for: the host may read or free its buffer as soon as this returns.
void transfer_kernel(const Tensor& dst, const Tensor& src) {
  TITAN_CHECK(dst.is_contiguous() && src.is_contiguous() && dst.nbytes() == src.nbytes(),
              "transfer from {} to {}: needs contiguous tensors of one size (shapes {} and {})", src.device().str(),
              dst.device().str(), shape_str(src.shape()), shape_str(dst.shape()));
  if (dst.nbytes() == 0) return;
  const cudaStream_t stream = current_stream();
  TITAN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDefault, stream));
  TITAN_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

void register_copy() {
  copy_kernels.set_kernel(DeviceType::cuda, copy_kernel);
  fill_kernels.set_kernel(DeviceType::cuda, fill_kernel);
  transfer_kernels.set_kernel(DeviceType::cuda, transfer_kernel);
}

}  // namespace titan::ops::cuda
