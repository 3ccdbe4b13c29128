// CPU embedding. The backward is a deterministic scatter-add: the vocabulary
// rows are split among threads and each thread scans every token, adding the
// ones that land in its rows in token order. No atomics, and the same sum
// order for any thread count.
#include <cstring>
#include <vector>

#include "titan/ops/embedding.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

std::vector<int64_t> read_ids(const Tensor& ids, int64_t num_embeddings) {
  std::vector<int64_t> values(static_cast<size_t>(ids.numel()));
  for (int64_t i = 0; i < ids.numel(); ++i) {
    values[static_cast<size_t>(i)] = ids.dtype() == DType::i64 ? ids.data<int64_t>()[i] : ids.data<int32_t>()[i];
    TITAN_CHECK(values[static_cast<size_t>(i)] >= 0 && values[static_cast<size_t>(i)] < num_embeddings,
                "embedding: id {} at position {} is outside the table of {} rows", values[static_cast<size_t>(i)], i,
                num_embeddings);
  }
  return values;
}

void embedding_kernel(const Tensor& out, const Tensor& weight, const Tensor& ids) {
  const std::vector<int64_t> rows = read_ids(ids, weight.size(0));
  const int64_t dim = weight.size(1);
  const size_t row_bytes = static_cast<size_t>(dim) * weight.element_size();
  const char* table = static_cast<const char*>(weight.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  parallel_for(static_cast<int64_t>(rows.size()), 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      std::memcpy(dst + static_cast<size_t>(t) * row_bytes, table + static_cast<size_t>(rows[t]) * row_bytes,
                  row_bytes);
    }
  });
}

template <typename T>
void scatter_add(float* grad, const T* dy, const std::vector<int64_t>& rows, int64_t vocab, int64_t dim) {
  parallel_for(vocab, 256, [&](int64_t first_row, int64_t end_row) {
    for (int64_t t = 0; t < static_cast<int64_t>(rows.size()); ++t) {
      const int64_t row = rows[static_cast<size_t>(t)];
      if (row < first_row || row >= end_row) continue;
      float* g = grad + row * dim;
      const T* d = dy + t * dim;
      for (int64_t c = 0; c < dim; ++c) g[c] += to_f32(d[c]);
    }
  });
}

void embedding_backward_kernel(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids) {
  const int64_t vocab = grad_weight.size(0), dim = grad_weight.size(1);
  const std::vector<int64_t> rows = read_ids(ids, vocab);
  dispatch_float("embedding_backward", grad_out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    scatter_add(grad_weight.data<float>(), grad_out.data<T>(), rows, vocab, dim);
  });
}

}  // namespace

void register_embedding() {
  embedding_kernels.set_kernel(DeviceType::cpu, embedding_kernel);
  embedding_backward_kernels.set_kernel(DeviceType::cpu, embedding_backward_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
