// CPU float8 casts and the scaled GEMM's unscaling (ops/float8.h). The
// rounding onto the fp8 grid is branch-free so each kernel set vectorises
// it; tests/ops/float8_test.cpp checks it against core/dtype.h's scalar
// casts on every fp8 value and the midpoints between them. Amaxes are maxima,
// which do not depend on the order of the reduction, so neither does the
// result on the thread count.
#include <array>
#include <cmath>
#include <span>
#include <vector>

#include "titan/ops/float8.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

struct Grid {
  float max;          // largest finite value: the saturation bound
  int mantissa_bits;  // 3 (e4m3) or 2 (e5m2)
  int min_exponent;   // of the smallest normal: -6 (e4m3) or -14 (e5m2)
  int max_exponent;   // of the largest binade: 8 (e4m3) or 15 (e5m2), the MX spec's emax
};

Grid grid_of(Float8Format format) {
  return format == Float8Format::e4m3 ? Grid{448.0f, 3, -6, 8} : Grid{57344.0f, 2, -14, 15};
}

inline float bits_to_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// Saturates v to +-max and rounds it to nearest-even at the quantum of its
// binade (of the smallest normal binade below it: the subnormals). NaN stays NaN.
inline float to_grid(float v, const Grid& grid) {
  const float clamped = std::min(std::max(v, -grid.max), grid.max);
  const int32_t exponent = std::max(static_cast<int32_t>((float_bits(clamped) >> 23) & 0xffu) - 127,
                                    static_cast<int32_t>(grid.min_exponent));
  const int32_t quantum_exponent = exponent - grid.mantissa_bits;
  const float quantum = bits_to_float(static_cast<uint32_t>(quantum_exponent + 127) << 23);
  const float inverse = bits_to_float(static_cast<uint32_t>(127 - quantum_exponent) << 23);
  // |clamped * inverse| < 2^(mantissa_bits + 1): adding 1.5 * 2^23 rounds it to an integer, nearest-even.
  const float units = (clamped * inverse + 12582912.0f) - 12582912.0f;
  return std::copysign(units * quantum, clamped);  // a negative that rounds to zero is -0, as the scalar cast's
}

// fmax / max(amax, 1e-12) computed in f64 and rounded to f32, then optionally
// rounded down to a power of two: torchao's amax_to_scale. NaN amax gives NaN.
float scale_from_amax(float amax, const Grid& grid, bool power_of_two) {
  if (std::isnan(amax)) return amax;
  auto scale = static_cast<float>(static_cast<double>(grid.max) / std::max(static_cast<double>(amax), 1e-12));
  if (power_of_two && std::isfinite(scale)) {
    int exponent;
    std::frexp(scale, &exponent);  // scale = m 2^exponent, m in [0.5, 1)
    scale = std::ldexp(1.0f, exponent - 1);
  }
  return scale;
}

// The e8m0 exponent of a block with this amax, biased by 127 on output
// (255 for NaN or inf). floor: floor(log2(amax)) - emax clamped to
// [-127, 128], read from amax's exponent field (a zero or f32 subnormal amax
// reads as -127). rceil: amax * f32(1 / fmax) rounded up to a power of two,
// from its bits: a set mantissa bit adds one to the exponent (an f32
// subnormal's, only above 2^-127), at most 127.
inline int32_t mx_exponent(float amax, const Grid& grid, MxScaleRounding rounding) {
  if (!std::isfinite(amax)) return 128;
  if (rounding == MxScaleRounding::rceil) {
    const uint32_t bits = float_bits(amax * (1.0f / grid.max));
    const auto biased = static_cast<int32_t>((bits >> 23) & 0xffu);
    const uint32_t mantissa = bits & 0x7fffffu;
    const int32_t round_up =
        biased == 0 ? static_cast<int32_t>(mantissa > 0x400000u) : static_cast<int32_t>(mantissa != 0);
    return biased + round_up - 127;
  }
  const int32_t floor_log2 = static_cast<int32_t>((float_bits(amax) >> 23) & 0xffu) - 127;
  return std::min(std::max(floor_log2 - grid.max_exponent, -127), 128);
}

// max |x[i * stride]| over n elements; NaN when any is NaN (torch.amax
// propagates it). The max and the NaN flag are separate reductions so that
// the loop vectorises.
template <typename T>
float strided_amax(const T* x, int64_t n, int64_t stride) {
  float running = 0.0f;
  int nan_seen = 0;
#pragma omp simd reduction(max : running) reduction(| : nan_seen)
  for (int64_t i = 0; i < n; ++i) {
    const float value = to_f32(x[i * stride]);
    running = std::max(running, std::fabs(value));
    nan_seen |= static_cast<int>(value != value);
  }
  return nan_seen != 0 ? std::numeric_limits<float>::quiet_NaN() : running;
}

inline float combine_amax(float a, float b) { return (std::isnan(a) || std::isnan(b)) ? NAN : std::max(a, b); }

// max |x| down each of `width` columns over rows [first, last) (rows `stride`
// elements apart), NaN for a column holding one, into amax[0, width). Row by
// row, so that the reads stay sequential; `nan_seen` is scratch of `width`.
template <typename T>
void column_amaxes(const T* x, int64_t first, int64_t last, int64_t stride, float* amax, std::vector<int>& nan_seen) {
  const size_t width = nan_seen.size();
  std::fill(amax, amax + width, 0.0f);
  std::fill(nan_seen.begin(), nan_seen.end(), 0);
  for (int64_t r = first; r < last; ++r) {
    const T* row = x + r * stride;
    for (size_t c = 0; c < width; ++c) {
      const float value = to_f32(row[c]);
      amax[c] = std::max(amax[c], std::fabs(value));
      nan_seen[c] |= static_cast<int>(value != value);
    }
  }
  for (size_t c = 0; c < width; ++c) {
    if (nan_seen[c] != 0) amax[c] = std::numeric_limits<float>::quiet_NaN();
  }
}

template <typename T>
float tensor_amax(const T* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<float> partial(static_cast<size_t>(chunks), 0.0f);
  parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      partial[static_cast<size_t>(c)] = strided_amax(x + c * kChunk, std::min(kChunk, n - c * kChunk), 1);
    }
  });
  float amax = 0.0f;
  for (const float value : partial) amax = combine_amax(amax, value);
  return amax;
}

// values = x * scale on the grid, or with `dequantize` that divided by the
// scale again (a multiply by its reciprocal: exact for the power-of-two
// scales float8_fake_quantize allows).
template <typename T>
void cast_scaled(const T* x, bf16* values, const float* scale, int64_t rows, int64_t cols, bool scale_per_row,
                 bool scale_per_col, bool dequantize, const Grid& grid) {
  std::vector<float> col_back(scale_per_col ? static_cast<size_t>(cols) : 0);
  for (size_t c = 0; c < col_back.size(); ++c) col_back[c] = dequantize ? 1.0f / scale[c] : 1.0f;
  parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* src = x + r * cols;
      bf16* dst = values + r * cols;
      if (scale_per_col) {
        for (int64_t c = 0; c < cols; ++c) {
          dst[c] = from_f32<bf16>(to_grid(to_f32(src[c]) * scale[c], grid) * col_back[static_cast<size_t>(c)]);
        }
      } else {
        const float s = scale_per_row ? scale[r] : scale[0], back = dequantize ? 1.0f / s : 1.0f;
        for (int64_t c = 0; c < cols; ++c) dst[c] = from_f32<bf16>(to_grid(to_f32(src[c]) * s, grid) * back);
      }
    }
  });
}

// 2^-e and 2^e of an e8m0 exponent; NaN for a NaN or inf block (exponent
// 128), so that every element of it is NaN, as torchao's.
inline float mx_inverse(int32_t exponent) {
  return exponent != 128 ? bits_to_float(static_cast<uint32_t>(127 - exponent) << 23) : NAN;
}
inline float mx_scale(int32_t exponent) { return exponent != 128 ? std::ldexp(1.0f, exponent) : NAN; }

template <typename T>
void cast_mx(const T* x, bf16* values, uint8_t* exponents, int64_t rows, int64_t cols, int64_t axis, const Grid& grid,
             MxScaleRounding rounding) {
  if (axis == 1) {  // blocks along each row: contiguous
    const int64_t blocks_per_row = cols / kMxBlockSize;
    parallel_for(rows * blocks_per_row, 64, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const T* src = x + b * kMxBlockSize;
        bf16* dst = values + b * kMxBlockSize;
        const int32_t exponent = mx_exponent(strided_amax(src, kMxBlockSize, 1), grid, rounding);
        exponents[b] = static_cast<uint8_t>(exponent + 127);
        const float inverse = mx_inverse(exponent), scale = mx_scale(exponent);
        for (int64_t i = 0; i < kMxBlockSize; ++i)
          dst[i] = from_f32<bf16>(to_grid(to_f32(src[i]) * inverse, grid) * scale);
      }
    });
    return;
  }
  // Blocks down each column: 32 rows at a time, swept row by row so that the
  // reads stay sequential and the loops run across columns.
  const int64_t row_blocks = rows / kMxBlockSize;
  parallel_for(row_blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> amax(static_cast<size_t>(cols)), inverse(static_cast<size_t>(cols)),
        scale(static_cast<size_t>(cols));
    std::vector<int> nan_seen(static_cast<size_t>(cols));
    for (int64_t rb = begin; rb < end; ++rb) {
      const int64_t first_row = rb * kMxBlockSize;
      column_amaxes(x, first_row, first_row + kMxBlockSize, cols, amax.data(), nan_seen);
      for (int64_t c = 0; c < cols; ++c) {
        const auto i = static_cast<size_t>(c);
        const int32_t exponent = mx_exponent(amax[i], grid, rounding);
        exponents[rb * cols + c] = static_cast<uint8_t>(exponent + 127);
        inverse[i] = mx_inverse(exponent);
        scale[i] = mx_scale(exponent);
      }
      for (int64_t r = first_row; r < first_row + kMxBlockSize; ++r) {
        const T* row = x + r * cols;
        bf16* dst = values + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
          const auto i = static_cast<size_t>(c);
          dst[c] = from_f32<bf16>(to_grid(to_f32(row[c]) * inverse[i], grid) * scale[i]);
        }
      }
    }
  });
}

void float8_cast_kernel(const Tensor& values, const Tensor& scale, const Tensor& x, const Float8Cast& cast,
                        int64_t axis, bool dequantize) {
  const Grid grid = grid_of(cast.format);
  const int64_t rows = x.size(0), cols = x.size(1);
  dispatch_float("float8_cast", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    bf16* dst = values.data<bf16>();
    switch (cast.scaling) {
      case Float8Scaling::tensorwise: {
        scale.data<float>()[0] = scale_from_amax(tensor_amax(src, x.numel()), grid, cast.power_of_two_scale);
        cast_scaled(src, dst, scale.data<float>(), rows, cols, false, false, dequantize, grid);
        return;
      }
      case Float8Scaling::axiswise: {
        float* scales = scale.data<float>();
        if (axis == 1) {
          parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              scales[r] = scale_from_amax(strided_amax(src + r * cols, cols, 1), grid, cast.power_of_two_scale);
            }
          });
        } else {
          parallel_for(cols, 16, [&](int64_t begin, int64_t end) {
            const auto width = static_cast<size_t>(end - begin);
            std::vector<float> amax(width);
            std::vector<int> nan_seen(width);
            column_amaxes(src + begin, 0, rows, cols, amax.data(), nan_seen);
            for (size_t c = 0; c < width; ++c) {
              scales[begin + static_cast<int64_t>(c)] = scale_from_amax(amax[c], grid, cast.power_of_two_scale);
            }
          });
        }
        cast_scaled(src, dst, scales, rows, cols, axis == 1, axis == 0, dequantize, grid);
        return;
      }
      case Float8Scaling::mx_block:
        cast_mx(src, dst, scale.data<uint8_t>(), rows, cols, axis, grid, cast.mx_rounding);
        return;
    }
  });
}

// Fake quantization down dim 0 within segments of rows: each segment has one
// scale per column. A group is one segment (axiswise) or is cut into 32-row
// segments from its first row, the last one short (MX).
template <typename T>
void fake_quantize_segments(const T* x, bf16* values, int64_t cols, std::span<const int64_t> bounds,
                            const Float8Cast& cast, const Grid& grid) {
  const auto segments = static_cast<int64_t>(bounds.size()) - 1;
  parallel_for(segments, 1, [&](int64_t begin, int64_t end) {
    const auto width = static_cast<size_t>(cols);
    std::vector<float> amax(width), to_fp8(width), from_fp8(width);  // the scale and its inverse
    std::vector<int> nan_seen(width);
    for (int64_t s = begin; s < end; ++s) {
      const int64_t first = bounds[static_cast<size_t>(s)], last = bounds[static_cast<size_t>(s) + 1];
      column_amaxes(x, first, last, cols, amax.data(), nan_seen);
      for (size_t c = 0; c < width; ++c) {
        const float a = amax[c];
        if (cast.scaling == Float8Scaling::mx_block) {
          const int32_t exponent = mx_exponent(a, grid, cast.mx_rounding);
          to_fp8[c] = mx_inverse(exponent);
          from_fp8[c] = mx_scale(exponent);
        } else {  // a power of two: its reciprocal is exact
          to_fp8[c] = scale_from_amax(a, grid, true);
          from_fp8[c] = 1.0f / to_fp8[c];
        }
      }
      for (int64_t r = first; r < last; ++r) {
        const T* row = x + r * cols;
        bf16* dst = values + r * cols;
        for (size_t c = 0; c < width; ++c)
          dst[c] = from_f32<bf16>(to_grid(to_f32(row[c]) * to_fp8[c], grid) * from_fp8[c]);
      }
    }
  });
}

void float8_fake_quantize_groups_kernel(const Tensor& values, const Tensor& x, const Tensor& counts,
                                        const Float8Cast& cast) {
  const Grid grid = grid_of(cast.format);
  const int64_t* per_group = counts.data<int64_t>();
  std::vector<int64_t> bounds{0};
  for (int64_t g = 0; g < counts.numel(); ++g) {
    const int64_t first = bounds.back(), last = first + per_group[g];
    TITAN_CHECK(per_group[g] >= 0 && last <= x.size(0),
                "float8_fake_quantize_groups: group {} of {} rows does not fit in x's {} rows", g, per_group[g],
                x.size(0));
    const int64_t step = cast.scaling == Float8Scaling::mx_block ? kMxBlockSize : std::max<int64_t>(last - first, 1);
    for (int64_t r = first + step; r < last; r += step) bounds.push_back(r);
    if (last > first) bounds.push_back(last);
  }
  TITAN_CHECK(bounds.back() == x.size(0), "float8_fake_quantize_groups: the counts add up to {} rows, x has {}",
              bounds.back(), x.size(0));
  dispatch_float("float8_fake_quantize_groups", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fake_quantize_segments(x.data<T>(), values.data<bf16>(), x.size(1), bounds, cast, grid);
  });
}

void float8_unscale_kernel(const Tensor& out, const Tensor& acc, const Tensor& a_scale, const Tensor& b_scale) {
  const int64_t rows = acc.size(0), cols = acc.size(1);
  // The reciprocals, as cuBLASLt's scale pointers take them: out = acc * (1 / a) * (1 / b).
  const auto reciprocals = [](const Tensor& scale, int64_t size) {
    std::vector<float> inverse(static_cast<size_t>(size), 1.0f);
    if (!scale.defined()) return inverse;
    const float* s = scale.data<float>();
    for (int64_t i = 0; i < size; ++i) inverse[static_cast<size_t>(i)] = 1.0f / s[scale.numel() == 1 ? 0 : i];
    return inverse;
  };
  const std::vector<float> row_inverse = reciprocals(a_scale, rows), col_inverse = reciprocals(b_scale, cols);
  const float* sum = acc.data<float>();
  dispatch_float("float8_scaled_mm", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dst = out.data<T>();
    parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float row = row_inverse[static_cast<size_t>(r)];
        const float* in = sum + r * cols;
        T* o = dst + r * cols;
        for (int64_t c = 0; c < cols; ++c) o[c] = from_f32<T>(in[c] * row * col_inverse[static_cast<size_t>(c)]);
      }
    });
  });
}

void float8_amaxes_kernel(const Tensor& out, std::span<const Tensor> parts) {
  float* amax = out.data<float>();
  for (size_t i = 0; i < parts.size(); ++i) {
    dispatch_float("float8_amaxes", parts[i].dtype(), [&](auto tag) {
      using T = decltype(tag);
      amax[i] = parts[i].numel() > 0 ? tensor_amax(parts[i].data<T>(), parts[i].numel()) : 0.0f;
    });
  }
}

void float8_scales_kernel(const Tensor& scales, const Tensor& amaxes, Float8Format format) {
  const Grid grid = grid_of(format);
  for (int64_t i = 0; i < amaxes.numel(); ++i)
    scales.data<float>()[i] = scale_from_amax(amaxes.data<float>()[i], grid, false);
}

// The OCP code of a value already on the grid (to_grid's result, NaN
// included): the sign, then the biased exponent and the mantissa's top bits,
// or below the smallest normal the count of subnormal quanta. Selects, not
// branches, so that the encoding loop vectorises; Float8Gather's tests check
// it against core/dtype.h's scalar cast on every code.
inline uint8_t grid_code(float on_grid, const Grid& grid) {
  const uint32_t bits = float_bits(on_grid);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xffu) - 127;
  const int32_t bias = 1 - grid.min_exponent;
  const uint32_t normal = (static_cast<uint32_t>(exponent + bias) << grid.mantissa_bits) |
                          ((bits & 0x7fffffu) >> (23 - grid.mantissa_bits));
  // |v| / 2^(min_exponent - mantissa_bits): an integer below 2^mantissa_bits.
  const float quanta =
      std::fabs(on_grid) * bits_to_float(static_cast<uint32_t>(127 + grid.mantissa_bits - grid.min_exponent) << 23);
  const uint32_t subnormal = static_cast<uint32_t>(quanta);
  const uint32_t nan_code = grid.mantissa_bits == 3 ? 0x7fu : 0x7eu;  // core/dtype.cpp's
  const uint32_t magnitude = exponent >= grid.min_exponent ? normal : subnormal;
  return static_cast<uint8_t>(on_grid != on_grid ? (nan_code | sign) : (magnitude | sign));
}

void float8_encode_kernel(const Tensor& codes, const Tensor& x, const Tensor& scales, int64_t index) {
  const Grid grid = grid_of(float8_format_of(codes.dtype()));
  const float scale = scales.data<float>()[index];
  auto* out = static_cast<uint8_t*>(codes.data_ptr());
  dispatch_float("float8_encode", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    parallel_for(x.numel(), 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = grid_code(to_grid(to_f32(src[i]) * scale, grid), grid);
    });
  });
}

// codes = values / 2^(e - 127) per block of 32 along each row: exact, as
// MX values are codes times their block's power of two.
void float8_mx_codes_kernel(const Tensor& codes, const Tensor& values, const Tensor& exponents) {
  const Grid grid = grid_of(float8_format_of(codes.dtype()));
  const bf16* src = values.data<bf16>();
  const uint8_t* scale = exponents.data<uint8_t>();
  auto* out = static_cast<uint8_t*>(codes.data_ptr());
  const int64_t blocks = values.numel() / kMxBlockSize;
  parallel_for(blocks, 64, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const float inverse = mx_inverse(static_cast<int32_t>(scale[block]) - 127);
      for (int64_t i = block * kMxBlockSize; i < (block + 1) * kMxBlockSize; ++i) {
        out[i] = grid_code(to_f32(src[i]) * inverse, grid);
      }
    }
  });
}

void float8_decode_kernel(const Tensor& values, const Tensor& codes) {
  // Every code's value, once: 256 entries.
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) {
    const auto bits = static_cast<uint8_t>(code);
    table[static_cast<size_t>(code)] = codes.dtype() == DType::f8e4m3 ? f8e4m3_to_float(bits) : f8e5m2_to_float(bits);
  }
  const auto* in = static_cast<const uint8_t*>(codes.data_ptr());
  dispatch_float("float8_decode", values.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dst = values.data<T>();
    parallel_for(values.numel(), 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dst[i] = from_f32<T>(table[in[i]]);
    });
  });
}

}  // namespace

void register_float8() {
  float8_cast_kernels.set_kernel(DeviceType::cpu, float8_cast_kernel);
  float8_unscale_kernels.set_kernel(DeviceType::cpu, float8_unscale_kernel);
  float8_fake_quantize_groups_kernels.set_kernel(DeviceType::cpu, float8_fake_quantize_groups_kernel);
  float8_amaxes_kernels.set_kernel(DeviceType::cpu, float8_amaxes_kernel);
  float8_scales_kernels.set_kernel(DeviceType::cpu, float8_scales_kernel);
  float8_encode_kernels.set_kernel(DeviceType::cpu, float8_encode_kernel);
  float8_decode_kernels.set_kernel(DeviceType::cpu, float8_decode_kernel);
  float8_mx_codes_kernels.set_kernel(DeviceType::cpu, float8_mx_codes_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
