// CPU rotary embedding: each (batch, position) row of H heads is rotated by
// that token's angles; rows in parallel. The backward is the same rotation
// with the sine negated (a rotation's inverse is its transpose). Features
// past the table's rotary width are copied.
#include <vector>

#include "titan/ops/rope.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

void rope_kernel(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
                 RopeStyle style, bool inverse) {
  // half: the rotated pairs per head (a table narrower than the head rotates its first 2 * half features).
  const int64_t batch = x.size(0), seq = x.size(1), heads = x.size(2), dim = x.size(3), half = cos.size(1);
  const int64_t max_positions = cos.size(0);
  std::vector<int64_t> position(static_cast<size_t>(batch * seq));
  for (int64_t i = 0; i < batch * seq; ++i) {
    int64_t p = i % seq;
    if (positions.defined())
      p = positions.dtype() == DType::i64 ? positions.data<int64_t>()[i] : positions.data<int32_t>()[i];
    TITAN_CHECK(p >= 0 && p < max_positions, "rope: position {} of token {} is outside the table of {} positions", p, i,
                max_positions);
    position[static_cast<size_t>(i)] = p;
  }
  const float sign = inverse ? -1.0f : 1.0f;
  dispatch_float("rope", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* o = out.data<T>();
    parallel_for(batch * seq, 8, [&](int64_t begin, int64_t end) {
      for (int64_t token = begin; token < end; ++token) {
        const float* c = cos.data<float>() + position[static_cast<size_t>(token)] * half;
        const float* s = sin.data<float>() + position[static_cast<size_t>(token)] * half;
        for (int64_t h = 0; h < heads; ++h) {
          const T* xr = in + (token * heads + h) * dim;
          T* orow = o + (token * heads + h) * dim;
          // Pair i is (first + i*step, first + i*step + gap): interleaved or halves.
          const int64_t step = style == RopeStyle::interleaved ? 2 : 1;
          const int64_t gap = style == RopeStyle::interleaved ? 1 : half;
          for (int64_t i = 0; i < half; ++i) {
            const float x0 = to_f32(xr[i * step]), x1 = to_f32(xr[i * step + gap]);
            const float si = sign * s[i];
            orow[i * step] = from_f32<T>(x0 * c[i] - x1 * si);
            orow[i * step + gap] = from_f32<T>(x0 * si + x1 * c[i]);
          }
          for (int64_t i = 2 * half; i < dim; ++i) orow[i] = xr[i];  // partial rotary: the rest passes through
        }
      }
    });
  });
}

}  // namespace

void register_rope() { rope_kernels.set_kernel(DeviceType::cpu, rope_kernel); }

}  // namespace titan::ops::cpu::TITAN_ISA
