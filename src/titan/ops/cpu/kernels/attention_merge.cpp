// Folds one piece of a query chunk's attention into the running result (ops/
// attention.h: attention_merge_), the log-sum-exp merge that lets context
// parallelism compute attention one key chunk at a time. f32 throughout; the
// piece is read in its own dtype.
#include <cmath>
#include <limits>

#include "titan/ops/attention.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

template <typename T>
void merge(const Tensor& out_acc, const Tensor& lse_acc, const Tensor& out, const Tensor& lse) {
  const int64_t batch = out.size(0), seq = out.size(1), heads = out.size(2), dim = out.size(3);
  float* acc = out_acc.data<float>();
  float* acc_lse = lse_acc.data<float>();
  const T* piece = out.data<T>();
  const float* piece_lse = lse.data<float>();
  parallel_for(batch * seq, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / seq, i = row % seq;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t stat = (b * heads + h) * seq + i;
        const float old_lse = acc_lse[stat], new_lse = piece_lse[stat];
        if (new_lse == -std::numeric_limits<float>::infinity()) continue;  // the piece saw no key
        const float m = std::max(old_lse, new_lse);
        // exp(-inf - m) = 0: a row that saw nothing so far takes the piece whole.
        const float keep = std::exp(old_lse - m), take = std::exp(new_lse - m);
        const float total = keep + take;
        const float keep_share = keep / total, take_share = take / total;
        float* o = acc + (row * heads + h) * dim;
        const T* p = piece + (row * heads + h) * dim;
#pragma omp simd
        for (int64_t d = 0; d < dim; ++d) o[d] = keep_share * o[d] + take_share * to_f32(p[d]);
        acc_lse[stat] = m + std::log(total);
      }
    }
  });
}

void attention_merge_kernel(const Tensor& out_acc, const Tensor& lse_acc, const Tensor& out, const Tensor& lse) {
  dispatch_float("attention_merge_", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    merge<T>(out_acc, lse_acc, out, lse);
  });
}

}  // namespace

void register_attention_merge() { attention_merge_kernels.set_kernel(DeviceType::cpu, attention_merge_kernel); }

}  // namespace titan::ops::cpu::TITAN_ISA
