// Launchers for the CUDA mixture-of-experts routing kernels (see
// ops/moe_routing.h for what each op computes). Plain pointers and sizes
// only; the Tensor plumbing lives in moe_routing.cpp. T tokens, k slots, the
// (token, slot) pairs numbered flat as token * k + slot.
//
// None of them reads anything back to the host, so a step through them can be
// recorded into a CUDA graph. The price: indices outside their range are not
// reported as the CPU kernels report them; they touch no memory out of bounds
// instead (each launcher says what they produce).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace titan::ops::cuda {

// values, indices [rows, k]: the k largest of each row of scores [rows,
// columns], descending, equal scores lower column first (columns < 2^32 - 1).
// NaN ranks below every number (the CPU kernel's order for NaN rows differs).
cudaError_t launch_topk(float* values, int64_t* indices, const float* scores, int64_t rows, int64_t columns, int64_t k,
                        cudaStream_t stream);

// Bytes of device workspace launch_expert_order needs.
cudaError_t expert_order_workspace(int64_t pairs, int64_t experts, size_t* bytes);
// A stable sort of the pairs by expert: order [pairs], inverse [pairs] and
// counts [experts] from indices [pairs] (experts < 2^32 - 1). A pair whose
// expert is outside [0, experts) sorts after every expert and is in no count.
cudaError_t launch_expert_order(int64_t* order, int64_t* inverse, int64_t* counts, const int64_t* indices,
                                int64_t pairs, int64_t experts, void* workspace, size_t workspace_bytes,
                                cudaStream_t stream);

// rows[p] = x[order[p] / k], rows of row_bytes bytes (any dtype).
cudaError_t launch_permute_tokens(void* rows, const void* x, int64_t row_bytes, const int64_t* order, int64_t pairs,
                                  int64_t k, cudaStream_t stream);
// grad_x[t] = sum over s of grad_rows[inverse[t*k + s]]; [tokens, dim], f32 or bf16.
cudaError_t launch_unpermute_sum(void* grad_x, const void* grad_rows, bool bf16, const int64_t* inverse, int64_t tokens,
                                 int64_t k, int64_t dim, cudaStream_t stream);
// out[t] = sum over s of weights[t, s] * rows[inverse[t*k + s]]; out and rows f32 or bf16.
cudaError_t launch_combine_experts(void* out, const void* rows, bool bf16, const int64_t* inverse, const float* weights,
                                   int64_t tokens, int64_t k, int64_t dim, cudaStream_t stream);
// grad_rows[inverse[t*k + s]] = weights[t, s] * grad_out[t];
// grad_weights[t, s] = <grad_out[t], rows[inverse[t*k + s]]>.
cudaError_t launch_combine_experts_backward(void* grad_rows, float* grad_weights, const void* grad_out,
                                            const void* rows, bool bf16, const int64_t* inverse, const float* weights,
                                            int64_t tokens, int64_t k, int64_t dim, cudaStream_t stream);

// out[t, s] = x[t, indices[t, s]] for x [rows, columns]; NaN for a column
// outside [0, columns).
cudaError_t launch_gather_columns(float* out, const float* x, const int64_t* indices, int64_t rows, int64_t columns,
                                  int64_t k, cudaStream_t stream);
// out[t, indices[t, s]] += grad[t, s] into a zeroed out [rows, columns], slot
// by slot (a column chosen twice gets both); a column outside the row is skipped.
cudaError_t launch_scatter_columns(float* out, const float* grad, const int64_t* indices, int64_t rows, int64_t columns,
                                   int64_t k, cudaStream_t stream);

// out[r] = x[r] / sum(x[r]) (0 where the sum is 0), and its backward.
cudaError_t launch_normalize_rows(float* out, const float* x, int64_t rows, int64_t columns, cudaStream_t stream);
cudaError_t launch_normalize_rows_backward(float* grad_x, const float* grad_out, const float* x, int64_t rows,
                                           int64_t columns, cudaStream_t stream);

// y = 1 / (1 + exp(-x)) and grad_x = grad_out * y * (1 - y); n elements, f32 or bf16.
cudaError_t launch_sigmoid(void* y, const void* x, bool bf16, int64_t n, cudaStream_t stream);
cudaError_t launch_sigmoid_backward(void* grad_x, const void* grad_out, const void* y, bool bf16, int64_t n,
                                    cudaStream_t stream);

}  // namespace titan::ops::cuda
