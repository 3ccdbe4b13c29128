// CPU copy and fill: any strides, any dtype pair. Contiguous same-dtype copies
// are parallel memcpy; f32 <-> bf16 get typed loops the compiler vectorises;
// every other pair converts element by element through double (exact for all
// formats here, see load_element), which is slow but only used by setup and tests.
#include <cstring>

#include "titan/core/copy.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

// Copies one row of n elements between strided locations.
template <typename D, typename S>
void copy_row_typed(D* dst, int64_t dst_stride, const S* src, int64_t src_stride, int64_t n) {
  if (dst_stride == 1 && src_stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = from_f32<D>(to_f32(src[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * dst_stride] = from_f32<D>(to_f32(src[i * src_stride]));
  }
}

void copy_row(void* dst, DType dst_dtype, int64_t dst_stride, const void* src, DType src_dtype, int64_t src_stride,
              int64_t n) {
  if (dst_dtype == src_dtype && dst_stride == 1 && src_stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(dst_dtype));
    return;
  }
  if (dst_dtype == DType::f32 && src_dtype == DType::bf16)
    return copy_row_typed(static_cast<float*>(dst), dst_stride, static_cast<const bf16*>(src), src_stride, n);
  if (dst_dtype == DType::bf16 && src_dtype == DType::f32)
    return copy_row_typed(static_cast<bf16*>(dst), dst_stride, static_cast<const float*>(src), src_stride, n);
  if (dst_dtype == DType::f32 && src_dtype == DType::f32)
    return copy_row_typed(static_cast<float*>(dst), dst_stride, static_cast<const float*>(src), src_stride, n);
  if (dst_dtype == src_dtype && dtype_size(dst_dtype) == 2) {
    auto* d = static_cast<uint16_t*>(dst);
    const auto* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) d[i * dst_stride] = s[i * src_stride];
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    store_element(dst, dst_dtype, i * dst_stride, load_element(src, src_dtype, i * src_stride));
}

// Storage offset (in elements) of the first element of row `row`, where rows
// enumerate every index of all dims but the last in row-major order.
int64_t row_offset(const Tensor& t, int64_t row) {
  int64_t offset = 0;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    const int64_t size = t.size(d);
    offset += (row % size) * t.stride(d);
    row /= size;
  }
  return offset;
}

void copy_kernel(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  char* dst_base = static_cast<char*>(dst.data_ptr());
  const char* src_base = static_cast<const char*>(src.data_ptr());
  const size_t dst_size = dst.element_size(), src_size = src.element_size();
  if (dst.is_contiguous() && src.is_contiguous()) {
    parallel_for(n, 1 << 15, [&](int64_t begin, int64_t end) {
      copy_row(dst_base + begin * dst_size, dst.dtype(), 1, src_base + begin * src_size, src.dtype(), 1, end - begin);
    });
    return;
  }
  if (dst.dim() == 0) {
    copy_row(dst_base, dst.dtype(), 1, src_base, src.dtype(), 1, 1);
    return;
  }
  const int64_t cols = dst.size(-1);
  const int64_t rows = n / cols;
  const int64_t dst_stride = dst.stride(-1), src_stride = src.stride(-1);
  parallel_for(rows, std::max<int64_t>(1, (1 << 14) / cols), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      copy_row(dst_base + row_offset(dst, row) * static_cast<int64_t>(dst_size), dst.dtype(), dst_stride,
               src_base + row_offset(src, row) * static_cast<int64_t>(src_size), src.dtype(), src_stride, cols);
    }
  });
}

template <typename T>
void fill_typed(T* data, int64_t n, T value) {
  parallel_for(n, 1 << 15, [&](int64_t begin, int64_t end) { std::fill(data + begin, data + end, value); });
}

void fill_kernel(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  if (!dst.is_contiguous()) {
    Tensor filled = Tensor::empty(dst.shape(), dst.dtype());
    fill_kernel(filled, value);
    copy_kernel(dst, filled);
    return;
  }
  const int64_t n = dst.numel();
  switch (dtype_size(dst.dtype())) {
    case 1: {
      uint8_t byte;
      store_element(&byte, dst.dtype(), 0, value);
      fill_typed(static_cast<uint8_t*>(dst.data_ptr()), n, byte);
      break;
    }
    case 2: {
      uint16_t half;
      store_element(&half, dst.dtype(), 0, value);
      fill_typed(static_cast<uint16_t*>(dst.data_ptr()), n, half);
      break;
    }
    case 4: {
      uint32_t word;
      store_element(&word, dst.dtype(), 0, value);
      fill_typed(static_cast<uint32_t*>(dst.data_ptr()), n, word);
      break;
    }
    default: {
      uint64_t word;
      store_element(&word, dst.dtype(), 0, value);
      fill_typed(static_cast<uint64_t*>(dst.data_ptr()), n, word);
      break;
    }
  }
}

}  // namespace

void register_copy() {
  copy_kernels.set_kernel(DeviceType::cpu, copy_kernel);
  fill_kernels.set_kernel(DeviceType::cpu, fill_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
