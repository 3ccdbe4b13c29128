// CUDA flash attention: Tensor plumbing and dtype dispatch around the kernels
// of attention_forward_kernels.cu and attention_backward_kernels.cu. The entry
// points (ops/attention.cpp) have checked shapes and dtypes and made every
// input contiguous; what is left here are the limits of the CUDA kernels.
#include <algorithm>
#include <climits>

#include "titan/core/tensor.h"
#include "titan/ops/attention.h"
#include "titan/core/copy.h"
#include "titan/ops/cuda/attention_kernels.cuh"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

AttentionElement element_of(const char* op, const Tensor& q) {
  switch (q.dtype()) {
    case DType::f32:
      return AttentionElement::f32;
    case DType::bf16:
      return AttentionElement::bf16;
    default:
      unsupported_dtype(op, q.device(), q.dtype());
  }
}

AttentionProblem problem_of(const char* op, const Tensor& q, const Tensor& k, const AttentionMask& mask, float scale) {
  const int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2), k_len = k.size(1), dim = q.size(3);
  TITAN_CHECK(dim >= 1 && dim <= kAttentionMaxHeadDim, "{}: head dim D = {} is not supported on CUDA (1 <= D <= {})",
              op, dim, kAttentionMaxHeadDim);
  TITAN_CHECK(k_len <= kAttentionMaxLength && q_len <= kAttentionMaxLength,
              "{}: {} queries / {} keys exceed the CUDA kernels' limit of {}", op, q_len, k_len, kAttentionMaxLength);
  // Grids put batch * heads on x, which holds up to 2^31 - 1 blocks.
  TITAN_CHECK(batch * heads <= INT_MAX, "{}: batch {} x {} heads exceeds the CUDA kernels' limit of {}", op, batch,
              heads, INT_MAX);
  const int64_t q_offset = mask.query_offset(q_len, k_len);
  // Positions are ints in the kernels: every query and key position relative to key 0 must fit.
  TITAN_CHECK(q_offset > -int64_t{INT_MAX} / 2 && q_offset < int64_t{INT_MAX} / 2,
              "{}: queries placed {} positions from the keys exceed the CUDA kernels' int positions", op, q_offset);
  AttentionProblem problem;
  problem.q_offset = static_cast<int>(q_offset);
  problem.batch = batch;
  problem.q_len = static_cast<int>(q_len);
  problem.k_len = static_cast<int>(k_len);
  problem.heads = static_cast<int>(heads);
  problem.kv_heads = static_cast<int>(k.size(2));
  problem.dim = static_cast<int>(dim);
  problem.causal = mask.causal;
  // A window longer than the farthest query-key distance (the last query's
  // position relative to key 0) hides nothing, so it is unlimited, and what
  // remains fits the kernels' int positions.
  const int64_t farthest = std::max<int64_t>(0, q_offset + q_len - 1);
  problem.window = mask.sliding_window > farthest ? 0 : static_cast<int>(mask.sliding_window);
  problem.scale = scale;
  problem.softcap = mask.logit_softcap;
  const Tensor& ids = mask.document_ids;
  if (ids.defined()) {
    TITAN_CHECK(ids.device() == q.device(), "{}: document_ids are on {} but q is on {}", op, ids.device().str(),
                q.device().str());
    if (ids.numel() > 0) {
      if (ids.dtype() == DType::i32) {
        problem.doc32 = ids.data<int32_t>();
      } else {
        problem.doc64 = ids.data<int64_t>();
      }
    }
  }
  const Tensor& query_ids = mask.query_document_ids;
  if (query_ids.defined() && query_ids.numel() > 0) {
    TITAN_CHECK(query_ids.device() == q.device(), "{}: query_document_ids are on {} but q is on {}", op,
                query_ids.device().str(), q.device().str());
    if (query_ids.dtype() == DType::i32) {
      problem.q_doc32 = query_ids.data<int32_t>();
    } else {
      problem.q_doc64 = query_ids.data<int64_t>();
    }
  }
  return problem;
}

// Empty tensors may have no memory behind them; the kernels never touch those.
const void* pointer(const Tensor& t) { return t.numel() == 0 ? nullptr : t.data_ptr(); }
void* pointer_mut(const Tensor& t) { return t.numel() == 0 ? nullptr : t.data_ptr(); }
const float* floats(const Tensor& t) { return t.numel() == 0 ? nullptr : t.data<float>(); }
float* floats_mut(const Tensor& t) { return t.numel() == 0 ? nullptr : t.data<float>(); }

void flash_attention_kernel(const AttentionOutput& result, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionMask& mask, float scale) {
  const char* op = "flash_attention";
  const AttentionElement element = element_of(op, q);
  const AttentionProblem problem = problem_of(op, q, k, mask, scale);
  if (q.numel() == 0) return;
  TITAN_CUDA_CHECK(launch_attention_forward(element, problem, pointer(q), pointer(k), pointer(v),
                                            pointer_mut(result.out), floats_mut(result.lse), current_stream()));
}

void flash_attention_backward_kernel(const AttentionGrads& grads, const Tensor& grad_out, const Tensor& q,
                                     const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                                     const AttentionMask& mask, float scale) {
  const char* op = "flash_attention_backward";
  const AttentionElement element = element_of(op, q);
  const AttentionProblem problem = problem_of(op, q, k, mask, scale);
  if (k.numel() == 0) {
    // No keys: no gradient reaches q (it may still have rows when the mask places the queries).
    if (grads.grad_q.numel() > 0) titan::fill_(grads.grad_q, 0.0);
    return;
  }
  // D_i = rowsum(dO_i * O_i), laid out like lse. The stream-ordered allocator
  // may hand this memory out again after we return: only to work queued
  // behind ours on the same stream.
  const Tensor delta = Tensor::empty(lse.shape(), DType::f32, q.device());
  TITAN_CUDA_CHECK(launch_attention_backward(element, problem, pointer(grad_out), pointer(q), pointer(k), pointer(v),
                                             pointer(out), floats(lse), floats_mut(delta), pointer_mut(grads.grad_q),
                                             pointer_mut(grads.grad_k), pointer_mut(grads.grad_v), current_stream()));
}

}  // namespace

void register_attention() {
  flash_attention_kernels.set_kernel(DeviceType::cuda, flash_attention_kernel);
  flash_attention_backward_kernels.set_kernel(DeviceType::cuda, flash_attention_backward_kernel);
}

}  // namespace titan::ops::cuda
