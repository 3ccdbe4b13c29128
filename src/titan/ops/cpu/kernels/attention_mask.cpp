// The attention mask as an additive bias (0 visible, -inf hidden), for the
// naive reference attention. Deliberately written from the mask's definition
// in ops/attention.h, independently of the flash kernel's block logic.
#include <limits>
#include <vector>

#include "titan/ops/attention.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

std::vector<int64_t> read_ids(const Tensor& ids) {
  std::vector<int64_t> values(static_cast<size_t>(ids.numel()));
  for (int64_t i = 0; i < ids.numel(); ++i) {
    values[static_cast<size_t>(i)] = ids.dtype() == DType::i64 ? ids.data<int64_t>()[i] : ids.data<int32_t>()[i];
  }
  return values;
}

void mask_bias_kernel(const Tensor& bias, const AttentionMask& mask) {
  const int64_t batch = bias.size(0), q_len = bias.size(1), k_len = bias.size(2);
  const int64_t key_start = mask.key_start;
  const int64_t query_start = mask.query_start < 0 ? key_start + k_len - q_len : mask.query_start;
  std::vector<int64_t> key_docs, query_docs;
  if (mask.document_ids.defined()) key_docs = read_ids(mask.document_ids);
  if (mask.query_document_ids.defined()) query_docs = read_ids(mask.query_document_ids);
  float* out = bias.data<float>();
  const float hidden = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t position = query_start + i;
      int64_t query_doc = 0;
      if (!query_docs.empty()) {
        query_doc = query_docs[static_cast<size_t>(b * q_len + i)];
      } else if (!key_docs.empty()) {
        query_doc = key_docs[static_cast<size_t>(b * k_len + position - key_start)];
      }
      for (int64_t j = 0; j < k_len; ++j) {
        const int64_t key = key_start + j;
        bool visible = true;
        if (mask.causal && key > position) visible = false;
        if (mask.sliding_window > 0 && position - key >= mask.sliding_window) visible = false;
        if (!key_docs.empty() && query_doc != key_docs[static_cast<size_t>(b * k_len + j)]) visible = false;
        out[(b * q_len + i) * k_len + j] = visible ? 0.0f : hidden;
      }
    }
  }
}

}  // namespace

void register_attention_mask() { mask_bias_kernels.set_kernel(DeviceType::cpu, mask_bias_kernel); }

}  // namespace titan::ops::cpu::TITAN_ISA
