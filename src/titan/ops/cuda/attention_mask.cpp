// CUDA attention-mask bias (what the naive reference attention adds to its
// scores). The entry point has checked shapes and made document_ids contiguous.
#include "titan/core/tensor.h"
#include "titan/ops/attention.h"
#include "titan/ops/cuda/attention_mask_kernels.cuh"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

void mask_bias_kernel(const Tensor& bias, const AttentionMask& mask) {
  if (bias.dtype() != DType::f32) unsupported_dtype("attention_mask_bias", bias.device(), bias.dtype());
  TITAN_CHECK(mask.default_layout(),
              "attention_mask_bias: query_start/key_start/query_document_ids are not supported on CUDA yet");
  const Tensor& docs = mask.document_ids;
  if (docs.defined()) {
    if (docs.dtype() != DType::i32 && docs.dtype() != DType::i64) {
      unsupported_dtype("attention_mask_bias (document_ids)", docs.device(), docs.dtype());
    }
    TITAN_CHECK(docs.device() == bias.device() && docs.is_contiguous(),
                "attention_mask_bias: document_ids must be contiguous on {}, got a tensor on {}", bias.device().str(),
                docs.device().str());
  }
  MaskBiasShape shape;
  shape.batch = bias.size(0);
  shape.q_len = bias.size(1);
  shape.k_len = bias.size(2);
  TITAN_CUDA_CHECK(launch_mask_bias(static_cast<float*>(bias.data_ptr()), shape, mask.causal, mask.sliding_window,
                                    docs.defined() ? docs.data_ptr() : nullptr,
                                    docs.defined() ? static_cast<int>(docs.element_size()) : 0, current_stream()));
}

}  // namespace

void register_attention_mask() { mask_bias_kernels.set_kernel(DeviceType::cuda, mask_bias_kernel); }

}  // namespace titan::ops::cuda
