// CUDA mixture-of-experts routing ops (see moe_routing_kernels.cuh): dtype
// checks and launches. The entry points in ops/moe_routing.cpp have checked
// shapes and made the operands contiguous. Nothing here reads device memory
// back, so a step through these ops can be recorded into a CUDA graph; in
// exchange, expert and column indices outside their range are not reported as
// the CPU kernels report them (the launchers say what they produce instead).
#include <cstdint>

#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/moe_routing_kernels.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/moe_routing.h"

namespace titan::ops::cuda {
namespace {

// The kernels' keys hold a column or expert below 2^32 - 1 (the top value is the "none" mark).
constexpr int64_t kMaxKeyedRange = int64_t{0xffffffff} - 1;

bool is_bf16(const char* op, const Tensor& t) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16) unsupported_dtype(op, t.device(), t.dtype());
  return t.dtype() == DType::bf16;
}

void topk_kernel(const Tensor& values, const Tensor& indices, const Tensor& scores) {
  const int64_t columns = scores.size(1);
  TITAN_CHECK(columns <= kMaxKeyedRange, "topk on {}: rows of {} columns are too long", scores.device().str(), columns);
  TITAN_CUDA_CHECK(launch_topk(values.data<float>(), indices.data<int64_t>(), scores.data<float>(), scores.size(0),
                               columns, values.size(1), current_stream()));
}

void expert_order_kernel(const Tensor& order, const Tensor& inverse, const Tensor& counts, const Tensor& indices) {
  const int64_t pairs = indices.numel(), experts = counts.numel();
  TITAN_CHECK(experts <= kMaxKeyedRange, "expert_order on {}: {} experts are too many", indices.device().str(),
              experts);
  size_t bytes = 0;
  TITAN_CUDA_CHECK(expert_order_workspace(pairs, experts, &bytes));
  const Tensor workspace = Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, indices.device());
  TITAN_CUDA_CHECK(launch_expert_order(order.data<int64_t>(), inverse.data<int64_t>(), counts.data<int64_t>(),
                                       indices.data<int64_t>(), pairs, experts, workspace.data_ptr(), bytes,
                                       current_stream()));
}

void permute_tokens_kernel(const Tensor& rows, const Tensor& x, const Tensor& order, int64_t k) {
  TITAN_CUDA_CHECK(launch_permute_tokens(rows.data_ptr(), x.data_ptr(),
                                         x.size(1) * static_cast<int64_t>(x.element_size()), order.data<int64_t>(),
                                         rows.size(0), k, current_stream()));
}

void unpermute_sum_kernel(const Tensor& grad_x, const Tensor& grad_rows, const Tensor& inverse, int64_t k) {
  const bool bf16 = is_bf16("unpermute_sum", grad_rows);
  TITAN_CUDA_CHECK(launch_unpermute_sum(grad_x.data_ptr(), grad_rows.data_ptr(), bf16, inverse.data<int64_t>(),
                                        grad_x.size(0), k, grad_x.size(1), current_stream()));
}

void combine_experts_kernel(const Tensor& out, const Tensor& rows, const Tensor& inverse, const Tensor& weights) {
  const bool bf16 = is_bf16("combine_experts", rows);
  TITAN_CUDA_CHECK(launch_combine_experts(out.data_ptr(), rows.data_ptr(), bf16, inverse.data<int64_t>(),
                                          weights.data<float>(), weights.size(0), weights.size(1), rows.size(1),
                                          current_stream()));
}

void combine_experts_backward_kernel(const Tensor& grad_rows, const Tensor& grad_weights, const Tensor& grad_out,
                                     const Tensor& rows, const Tensor& inverse, const Tensor& weights) {
  const bool bf16 = is_bf16("combine_experts_backward", rows);
  TITAN_CUDA_CHECK(launch_combine_experts_backward(grad_rows.data_ptr(), grad_weights.data<float>(),
                                                   grad_out.data_ptr(), rows.data_ptr(), bf16, inverse.data<int64_t>(),
                                                   weights.data<float>(), weights.size(0), weights.size(1),
                                                   rows.size(1), current_stream()));
}

void gather_columns_kernel(const Tensor& out, const Tensor& x, const Tensor& indices) {
  TITAN_CUDA_CHECK(launch_gather_columns(out.data<float>(), x.data<float>(), indices.data<int64_t>(), x.size(0),
                                         x.size(1), indices.size(1), current_stream()));
}

void scatter_columns_kernel(const Tensor& out, const Tensor& grad, const Tensor& indices) {
  TITAN_CUDA_CHECK(launch_scatter_columns(out.data<float>(), grad.data<float>(), indices.data<int64_t>(), out.size(0),
                                          out.size(1), indices.size(1), current_stream()));
}

void normalize_rows_kernel(const Tensor& out, const Tensor& x) {
  TITAN_CUDA_CHECK(launch_normalize_rows(out.data<float>(), x.data<float>(), x.size(0), x.size(1), current_stream()));
}

void normalize_rows_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x) {
  TITAN_CUDA_CHECK(launch_normalize_rows_backward(grad_x.data<float>(), grad_out.data<float>(), x.data<float>(),
                                                  x.size(0), x.size(1), current_stream()));
}

void sigmoid_kernel(const Tensor& y, const Tensor& x) {
  const bool bf16 = is_bf16("sigmoid", x);
  TITAN_CUDA_CHECK(launch_sigmoid(y.data_ptr(), x.data_ptr(), bf16, x.numel(), current_stream()));
}

void sigmoid_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y) {
  const bool bf16 = is_bf16("sigmoid_backward", y);
  TITAN_CUDA_CHECK(
      launch_sigmoid_backward(grad_x.data_ptr(), grad_out.data_ptr(), y.data_ptr(), bf16, y.numel(), current_stream()));
}

}  // namespace

void register_moe_routing() {
  topk_kernels.set_kernel(DeviceType::cuda, topk_kernel);
  expert_order_kernels.set_kernel(DeviceType::cuda, expert_order_kernel);
  permute_tokens_kernels.set_kernel(DeviceType::cuda, permute_tokens_kernel);
  unpermute_sum_kernels.set_kernel(DeviceType::cuda, unpermute_sum_kernel);
  combine_experts_kernels.set_kernel(DeviceType::cuda, combine_experts_kernel);
  combine_experts_backward_kernels.set_kernel(DeviceType::cuda, combine_experts_backward_kernel);
  gather_columns_kernels.set_kernel(DeviceType::cuda, gather_columns_kernel);
  scatter_columns_kernels.set_kernel(DeviceType::cuda, scatter_columns_kernel);
  normalize_rows_kernels.set_kernel(DeviceType::cuda, normalize_rows_kernel);
  normalize_rows_backward_kernels.set_kernel(DeviceType::cuda, normalize_rows_backward_kernel);
  sigmoid_kernels.set_kernel(DeviceType::cuda, sigmoid_kernel);
  sigmoid_backward_kernels.set_kernel(DeviceType::cuda, sigmoid_backward_kernel);
}

}  // namespace titan::ops::cuda
