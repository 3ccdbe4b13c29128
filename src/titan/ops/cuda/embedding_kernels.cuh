// Launchers for the CUDA embedding lookup and its deterministic backward.
// Plain pointers and sizes only; the Tensor plumbing lives in embedding.cpp.
//
// Both validate the ids on the device: an id outside [0, vocab) touches no
// memory and lowers *bad_position (which the launcher first sets to
// kNoBadPosition) to the first position holding one, for the host to report.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace titan::ops::cuda {

inline constexpr unsigned long long kNoBadPosition = ~0ULL;

// out[t] = weight[ids[t]], rows of row_bytes bytes (any dtype); ids i32 or i64.
cudaError_t launch_embedding(void* out, const void* weight, int64_t vocab, int64_t row_bytes, const void* ids,
                             bool ids_i64, int64_t tokens, unsigned long long* bad_position, cudaStream_t stream);

// Bytes of device workspace launch_embedding_backward needs.
cudaError_t embedding_backward_workspace(int64_t tokens, int64_t vocab, size_t* bytes);

// grad_weight[v] (f32, [vocab, dim]) += the grad_out rows (f32 or bf16) of the
// tokens whose id is v, added in token order: ids are stable-sorted, and each
// distinct id's rows are summed by one thread per column. No atomics.
cudaError_t launch_embedding_backward(float* grad_weight, const void* grad_out, bool grad_bf16, const void* ids,
                                      bool ids_i64, int64_t tokens, int64_t vocab, int64_t dim, void* workspace,
                                      size_t workspace_bytes, unsigned long long* bad_position, cudaStream_t stream);

}  // namespace titan::ops::cuda
