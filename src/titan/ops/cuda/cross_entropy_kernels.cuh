// Launchers for the CUDA cross-entropy over materialised logits, forward and
// backward. Plain pointers and sizes only; the Tensor plumbing lives in
// cross_entropy.cpp. The formulas are the CPU kernel's (see
// ops/cpu/kernels/cross_entropy.cpp); one block handles one row at a time.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace titan::ops::cuda {

struct CrossEntropyParams {
  int64_t ignore_index;
  float softcap;  // > 0: logits become softcap * tanh(logits / softcap)
  float z_loss;
  bool mean;
};

// What the forward reports to the host, in one device array.
struct CrossEntropyStatus {
  unsigned long long counted;  // rows whose target is not ignore_index
  unsigned long long bad_row;  // first row with a target outside [0, vocab), else kNoBadRow
};
inline constexpr unsigned long long kNoBadRow = ~0ULL;

// lse[row] for every row, *loss (reduced as params say, 0 when nothing is
// counted) and *status. `row_loss` is scratch for `rows` floats.
cudaError_t launch_cross_entropy(float* loss, float* lse, const void* logits, bool logits_bf16, const void* targets,
                                 bool targets_i64, int64_t rows, int64_t vocab, const CrossEntropyParams& params,
                                 float* row_loss, CrossEntropyStatus* status, cudaStream_t stream);

// grad (logits' dtype) = d(loss)/d(logits) * *grad_loss, read on the device.
// Ignored rows get zeros; a row whose target is outside [0, vocab) gets NaN
// (the backward cannot raise an error without waiting for the device).
cudaError_t launch_cross_entropy_backward(void* grad, const void* logits, bool logits_bf16, const void* targets,
                                          bool targets_i64, const float* lse, const float* grad_loss, int64_t counted,
                                          int64_t rows, int64_t vocab, const CrossEntropyParams& params,
                                          cudaStream_t stream);

}  // namespace titan::ops::cuda
