#include "titan/ops/attention.h"

#include "titan/core/trace_context.h"

#include <algorithm>
#include <cmath>

#include "titan/core/copy.h"
#include "titan/core/profiler.h"

#include "titan/ops/checks.h"

namespace titan::ops {
namespace {

void check_attention_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionMask& mask) {
  check_defined(op, q, "q");
  check_defined(op, k, "k");
  check_defined(op, v, "v");
  check_rank(op, q, 4, "q [B, Sq, Hq, D]");
  check_rank(op, k, 4, "k [B, Sk, Hkv, D]");
  check_rank(op, v, 4, "v [B, Sk, Hkv, Dv]");
  TITAN_CHECK(k.size(0) == v.size(0) && k.size(1) == v.size(1) && k.size(2) == v.size(2),
              "{}: k {} and v {} differ in batch, keys or heads", op, shape_str(k.shape()), shape_str(v.shape()));
  check_same_dtype(op, q, k);
  check_same_dtype(op, q, v);
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  check_dtype(op, q, {DType::f32, DType::bf16}, "q");
  TITAN_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3), "{}: q {} and k {} differ in batch or head dim", op,
              shape_str(q.shape()), shape_str(k.shape()));
  TITAN_CHECK(k.size(2) > 0 && q.size(2) % k.size(2) == 0,
              "{}: {} query heads are not a multiple of {} key/value heads", op, q.size(2), k.size(2));
  TITAN_CHECK(mask.query_start >= 0 || q.size(1) <= k.size(1), "{}: {} queries but only {} keys", op, q.size(1),
              k.size(1));
  TITAN_CHECK(mask.sliding_window >= 0, "{}: sliding_window must be >= 0, got {}", op, mask.sliding_window);
  TITAN_CHECK(mask.logit_softcap >= 0.0f && std::isfinite(mask.logit_softcap),
              "{}: logit_softcap must be finite and >= 0 (0 = no cap), got {}", op, mask.logit_softcap);
  TITAN_CHECK(mask.key_start >= 0 && mask.query_start >= -1, "{}: key_start {} / query_start {} out of range", op,
              mask.key_start, mask.query_start);
  check_document_ids(op, mask, q.size(0), q.size(1), k.size(1));
  if (mask.sinks.defined()) {
    check_dtype(op, mask.sinks, {DType::f32}, "sinks");
    check_same_device(op, q, mask.sinks);
    TITAN_CHECK(mask.sinks.dim() == 1 && mask.sinks.size(0) == q.size(2), "{}: sinks {} must be [Hq] = [{}]", op,
                shape_str(mask.sinks.shape()), q.size(2));
  }
}

// [B, S, H, value_dim]: the shape of an attention output for q.
Shape output_shape(const Tensor& q, const Tensor& v) { return {q.size(0), q.size(1), q.size(2), v.size(3)}; }

}  // namespace

void check_document_ids(const char* op, const AttentionMask& mask, int64_t batch, int64_t q_len, int64_t k_len) {
  if (mask.query_document_ids.defined()) {
    TITAN_CHECK(mask.document_ids.defined(), "{}: query_document_ids without the keys' document_ids", op);
    check_dtype(op, mask.query_document_ids, {DType::i32, DType::i64}, "query_document_ids");
    TITAN_CHECK(mask.query_document_ids.dim() == 2 && mask.query_document_ids.size(0) == batch &&
                    mask.query_document_ids.size(1) == q_len,
                "{}: query_document_ids {} must be [B, Sq] = [{}, {}]", op, shape_str(mask.query_document_ids.shape()),
                batch, q_len);
  } else if (mask.document_ids.defined()) {
    TITAN_CHECK(mask.query_start < 0 && mask.key_start == 0,
                "{}: queries placed by query_start/key_start need their own query_document_ids", op);
  }
  if (mask.document_ids.defined()) {
    check_dtype(op, mask.document_ids, {DType::i32, DType::i64}, "document_ids");
    TITAN_CHECK(
        mask.document_ids.dim() == 2 && mask.document_ids.size(0) == batch && mask.document_ids.size(1) == k_len,
        "{}: document_ids {} must be [B, Sk] = [{}, {}]", op, shape_str(mask.document_ids.shape()), batch, k_len);
  }
}

namespace {

AttentionMask contiguous_mask(const AttentionMask& mask) {
  AttentionMask result = mask;
  if (mask.document_ids.defined()) result.document_ids = mask.document_ids.contiguous();
  if (mask.query_document_ids.defined()) result.query_document_ids = mask.query_document_ids.contiguous();
  result.sinks = Tensor();  // folded in by the op, not the kernels
  return result;
}

// The CPU kernels take a value head dim Dv other than the query/key one D; the
// CUDA kernels' register tiles assume one D. For those, every head is padded
// with zeros to max(D, Dv), which changes no score (zero q/k dims add nothing)
// and no output (zero v dims give zero columns, cut off again), at the cost of
// computing the padding.
bool kernel_takes_value_dim(Device device) { return device.is_cpu(); }

// x [.., d] widened to [.., dim] with zeros (x itself when already that wide).
Tensor pad_head_dim(const Tensor& x, int64_t dim) {
  if (x.size(3) == dim) return x;
  Shape shape = x.shape();
  shape[3] = dim;
  Tensor padded = Tensor::zeros(shape, x.dtype(), x.device());
  titan::copy_(padded.narrow(3, 0, x.size(3)), x);
  return padded;
}

Tensor cut_head_dim(const Tensor& x, int64_t dim) { return x.size(3) == dim ? x : x.narrow(3, 0, dim).contiguous(); }

// Query-key pairs the causal mask and window leave visible (packed documents
// hide more: the count is then an upper bound), for the profiler's FLOPs.
double visible_pairs(const Tensor& q, const Tensor& k, const AttentionMask& mask) {
  const int64_t q_len = q.size(1), k_len = k.size(1);
  if (!mask.causal && mask.sliding_window <= 0) return static_cast<double>(q_len) * static_cast<double>(k_len);
  const int64_t offset = mask.query_offset(q_len, k_len);
  double pairs = 0.0;
  for (int64_t i = 0; i < q_len; ++i) {
    const int64_t position = offset + i;  // the query's position on the keys' axis
    const int64_t last = mask.causal ? std::min(position, k_len - 1) : k_len - 1;
    const int64_t first = mask.sliding_window > 0 ? std::max<int64_t>(0, position - mask.sliding_window + 1) : 0;
    if (last >= first) pairs += static_cast<double>(last - first + 1);
  }
  return pairs;
}

// Two GEMMs forward (scores over D, then their product with V over Dv): 2 (D + Dv) FLOPs per visible pair.
double attention_flops(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  if (!profiler::active()) return 0.0;
  return 2.0 * static_cast<double>(q.size(0) * q.size(2) * (q.size(3) + v.size(3))) * visible_pairs(q, k, mask);
}

}  // namespace

AttentionOutput flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask,
                                float scale) {
  const trace::OpScope op_scope("flash_attention");
  check_attention_inputs("flash_attention", q, k, v, mask);
  AttentionOutput result{Tensor::empty(output_shape(q, v), q.dtype(), q.device()),
                         Tensor::empty({q.size(0), q.size(2), q.size(1)}, DType::f32, q.device())};
  if (q.device().is_meta()) return result;
  profiler::note_flops(attention_flops(q, k, v, mask));
  const int64_t dim = q.size(3), value_dim = v.size(3);
  if (dim == value_dim || kernel_takes_value_dim(q.device())) {
    flash_attention_kernels(q.device(), result, q.contiguous(), k.contiguous(), v.contiguous(), contiguous_mask(mask),
                            scale);
  } else {
    const int64_t padded = std::max(dim, value_dim);
    const AttentionOutput wide{Tensor::empty({q.size(0), q.size(1), q.size(2), padded}, q.dtype(), q.device()),
                               result.lse};
    flash_attention_kernels(q.device(), wide, pad_head_dim(q.contiguous(), padded),
                            pad_head_dim(k.contiguous(), padded), pad_head_dim(v.contiguous(), padded),
                            contiguous_mask(mask), scale);
    result.out = cut_head_dim(wide.out, value_dim);
  }
  if (mask.sinks.defined()) attention_fold_sinks_(result.out, result.lse, mask.sinks);
  return result;
}

AttentionGrads flash_attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& lse, const AttentionMask& mask, float scale) {
  const trace::OpScope op_scope("flash_attention_backward");
  check_attention_inputs("flash_attention_backward", q, k, v, mask);
  const char* op = "flash_attention_backward";
  TITAN_CHECK(grad_out.defined() && out.defined() && grad_out.shape() == output_shape(q, v) &&
                  out.shape() == output_shape(q, v),
              "{}: grad_out and out must be [B, Sq, Hq, Dv] = {}", op, shape_str(output_shape(q, v)));
  check_same_dtype("flash_attention_backward", grad_out, q);
  check_same_dtype("flash_attention_backward", out, q);
  // The kernel indexes lse as [B, Hq, Sq] f32: a mismatch would read out of bounds.
  check_defined("flash_attention_backward", lse, "lse");
  check_dtype("flash_attention_backward", lse, {DType::f32}, "lse");
  TITAN_CHECK(lse.shape() == (Shape{q.size(0), q.size(2), q.size(1)}),
              "flash_attention_backward: lse {} must be [B, Hq, Sq] = [{}, {}, {}]", shape_str(lse.shape()), q.size(0),
              q.size(2), q.size(1));
  AttentionGrads grads{Tensor::empty(q.shape(), q.dtype(), q.device()), Tensor::empty(k.shape(), k.dtype(), k.device()),
                       Tensor::empty(v.shape(), v.dtype(), v.device()), Tensor()};
  if (q.device().is_meta()) {
    if (mask.sinks.defined()) grads.grad_sinks = Tensor::empty(mask.sinks.shape(), DType::f32, q.device());
    return grads;
  }
  // Five GEMMs: the scores recomputed, dV, dP, dQ and dK.
  profiler::note_flops(2.5 * attention_flops(q, k, v, mask));
  // With sinks, lse and out already include them: P = exp(S - lse) is the
  // sink-aware probability and rowsum(dO * O) the right softmax correction
  // (the sink column adds no value to O), so the kernels need nothing more.
  const int64_t dim = q.size(3), value_dim = v.size(3);
  if (dim == value_dim || kernel_takes_value_dim(q.device())) {
    flash_attention_backward_kernels(q.device(), grads, grad_out.contiguous(), q.contiguous(), k.contiguous(),
                                     v.contiguous(), out.contiguous(), lse.contiguous(), contiguous_mask(mask), scale);
  } else {
    const int64_t padded = std::max(dim, value_dim);
    const auto wide = [&](const Tensor& x) { return pad_head_dim(x.contiguous(), padded); };
    const Tensor wide_q = wide(q), wide_k = wide(k), wide_v = wide(v);
    const AttentionGrads wide_grads{Tensor::empty(wide_q.shape(), q.dtype(), q.device()),
                                    Tensor::empty(wide_k.shape(), k.dtype(), k.device()),
                                    Tensor::empty(wide_v.shape(), v.dtype(), v.device()), Tensor()};
    flash_attention_backward_kernels(q.device(), wide_grads, wide(grad_out), wide_q, wide_k, wide_v, wide(out),
                                     lse.contiguous(), contiguous_mask(mask), scale);
    grads.grad_q = cut_head_dim(wide_grads.grad_q, dim);
    grads.grad_k = cut_head_dim(wide_grads.grad_k, dim);
    grads.grad_v = cut_head_dim(wide_grads.grad_v, value_dim);
  }
  if (mask.sinks.defined()) grads.grad_sinks = attention_sinks_backward(grad_out, out, lse, mask.sinks);
  return grads;
}

void attention_merge_(const Tensor& out_acc, const Tensor& lse_acc, const Tensor& out, const Tensor& lse) {
  const trace::OpScope op_scope("attention_merge_");
  const char* op = "attention_merge_";
  check_rank(op, out_acc, 4, "out_acc [B, S, Hq, D]");
  check_dtype(op, out_acc, {DType::f32}, "out_acc");
  check_dtype(op, lse_acc, {DType::f32}, "lse_acc");
  check_dtype(op, lse, {DType::f32}, "lse");
  check_same_shape(op, out_acc, out);
  check_same_shape(op, lse_acc, lse);
  TITAN_CHECK(lse.shape() == (Shape{out.size(0), out.size(2), out.size(1)}),
              "{}: lse {} must be [B, Hq, S] = [{}, {}, {}]", op, shape_str(lse.shape()), out.size(0), out.size(2),
              out.size(1));
  TITAN_CHECK(out_acc.is_contiguous() && lse_acc.is_contiguous(), "{}: the accumulators must be contiguous", op);
  if (out.device().is_meta()) return;
  attention_merge_kernels(out.device(), out_acc, lse_acc, out.contiguous(), lse.contiguous());
}

namespace {

void check_sinks_result(const char* op, const Tensor& out, const Tensor& lse, const Tensor& sinks) {
  check_rank(op, out, 4, "out [B, S, Hq, Dv]");
  check_dtype(op, out, {DType::f32, DType::bf16}, "out");
  check_dtype(op, lse, {DType::f32}, "lse");
  check_dtype(op, sinks, {DType::f32}, "sinks");
  check_same_device(op, out, lse);
  check_same_device(op, out, sinks);
  TITAN_CHECK(lse.shape() == (Shape{out.size(0), out.size(2), out.size(1)}),
              "{}: lse {} must be [B, Hq, S] = [{}, {}, {}]", op, shape_str(lse.shape()), out.size(0), out.size(2),
              out.size(1));
  TITAN_CHECK(sinks.dim() == 1 && sinks.size(0) == out.size(2), "{}: sinks {} must be [Hq] = [{}]", op,
              shape_str(sinks.shape()), out.size(2));
}

}  // namespace

void attention_fold_sinks_(const Tensor& out, const Tensor& lse, const Tensor& sinks) {
  const trace::OpScope op_scope("attention_fold_sinks_");
  check_sinks_result("attention_fold_sinks_", out, lse, sinks);
  TITAN_CHECK(out.is_contiguous() && lse.is_contiguous(), "attention_fold_sinks_: out and lse must be contiguous");
  if (out.device().is_meta()) return;
  attention_fold_sinks_kernels(out.device(), out, lse, sinks.contiguous());
}

Tensor attention_sinks_backward(const Tensor& grad_out, const Tensor& out, const Tensor& lse, const Tensor& sinks) {
  const trace::OpScope op_scope("attention_sinks_backward");
  const char* op = "attention_sinks_backward";
  check_sinks_result(op, out, lse, sinks);
  check_same_shape(op, grad_out, out);
  check_same_dtype(op, grad_out, out);
  Tensor grad_sinks = Tensor::empty(sinks.shape(), DType::f32, sinks.device());
  if (!out.device().is_meta()) {
    attention_sinks_backward_kernels(out.device(), grad_sinks, grad_out.contiguous(), out.contiguous(),
                                     lse.contiguous(), sinks.contiguous());
  }
  return grad_sinks;
}

Tensor attention_mask_bias(const AttentionMask& mask, int64_t batch, int64_t q_len, int64_t k_len, Device device) {
  const trace::OpScope op_scope("attention_mask_bias");
  TITAN_CHECK(mask.query_start >= 0 || q_len <= k_len, "attention_mask_bias: {} queries but only {} keys", q_len,
              k_len);
  check_document_ids("attention_mask_bias", mask, batch, q_len, k_len);
  Tensor bias = Tensor::empty({batch, q_len, k_len}, DType::f32, device);
  if (!device.is_meta()) mask_bias_kernels(device, bias, contiguous_mask(mask));
  return bias;
}

}  // namespace titan::ops
