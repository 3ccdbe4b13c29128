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

void mask_bias_kernel(const Tensor& bias, const AttentionMask& mask) {
  const int64_t batch = bias.size(0), q_len = bias.size(1), k_len = bias.size(2);
  std::vector<int64_t> docs;
  if (mask.document_ids.defined()) {
    docs.resize(static_cast<size_t>(batch * k_len));
    for (int64_t i = 0; i < batch * k_len; ++i) {
      docs[static_cast<size_t>(i)] = mask.document_ids.dtype() == DType::i64 ? mask.document_ids.data<int64_t>()[i]
                                                                             : mask.document_ids.data<int32_t>()[i];
    }
  }
  float* out = bias.data<float>();
  const float hidden = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t position = k_len - q_len + i;
      for (int64_t j = 0; j < k_len; ++j) {
        bool visible = true;
        if (mask.causal && j > position) visible = false;
        if (mask.sliding_window > 0 && position - j >= mask.sliding_window) visible = false;
        if (!docs.empty() &&
            docs[static_cast<size_t>(b * k_len + position)] != docs[static_cast<size_t>(b * k_len + j)])
          visible = false;
        out[(b * q_len + i) * k_len + j] = visible ? 0.0f : hidden;
      }
    }
  }
}

}  // namespace

void register_attention_mask() { mask_bias_kernels.set_kernel(DeviceType::cpu, mask_bias_kernel); }

}  // namespace titan::ops::cpu::TITAN_ISA
