// CUDA embedding lookup and its deterministic scatter-add backward (see
// embedding_kernels.cuh). Ids are validated on the device; the host reads the
// verdict back so a bad id is the CPU backend's titan::Error.
#include <limits>

#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/embedding_kernels.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/embedding.h"

namespace titan::ops::cuda {
namespace {

// One device word where the kernels record the first bad position.
Tensor bad_position_flag(Device device) { return Tensor::empty({1}, DType::i64, device); }

// Throws the CPU kernel's error if the kernels recorded a bad id. Reading the
// flag waits for the stream: the price of reporting the id as the CPU does.
// While the stream is being captured into a graph nothing can be read back,
// so the check is skipped (the kernels still touch no memory for a bad id).
void check_ids(const Tensor& flag, const Tensor& ids, int64_t vocab) {
  cudaStream_t stream = current_stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TITAN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;
  unsigned long long position = kNoBadPosition;
  TITAN_CUDA_CHECK(cudaMemcpyAsync(&position, flag.data_ptr(), sizeof(position), cudaMemcpyDeviceToHost, stream));
  TITAN_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (position == kNoBadPosition) return;
  const auto at = static_cast<int64_t>(position);
  int64_t id = 0;
  int32_t id32 = 0;
  const bool i64 = ids.dtype() == DType::i64;
  TITAN_CUDA_CHECK(cudaMemcpyAsync(i64 ? static_cast<void*>(&id) : static_cast<void*>(&id32),
                                   static_cast<const char*>(ids.data_ptr()) + at * ids.element_size(),
                                   ids.element_size(), cudaMemcpyDeviceToHost, stream));
  TITAN_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (!i64) id = id32;
  fail("embedding: id {} at position {} is outside the table of {} rows", id, at, vocab);
}

bool ids_are_i64(const char* op, const Tensor& ids) {
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::i64) unsupported_dtype(op, ids.device(), ids.dtype());
  return ids.dtype() == DType::i64;
}

void embedding_kernel(const Tensor& out, const Tensor& weight, const Tensor& ids) {
  const bool i64 = ids_are_i64("embedding", ids);
  const Tensor flag = bad_position_flag(out.device());
  const int64_t vocab = weight.size(0);
  TITAN_CUDA_CHECK(launch_embedding(out.data_ptr(), weight.data_ptr(), vocab,
                                    weight.size(1) * static_cast<int64_t>(weight.element_size()), ids.data_ptr(), i64,
                                    ids.numel(), static_cast<unsigned long long*>(flag.data_ptr()), current_stream()));
  check_ids(flag, ids, vocab);
}

void embedding_backward_kernel(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& ids) {
  const bool i64 = ids_are_i64("embedding_backward", ids);
  if (grad_out.dtype() != DType::f32 && grad_out.dtype() != DType::bf16) {
    unsupported_dtype("embedding_backward", grad_out.device(), grad_out.dtype());
  }
  const int64_t vocab = grad_weight.size(0), dim = grad_weight.size(1), tokens = ids.numel();
  // Sort keys and token positions are 32-bit; columns are spread over grid.y.
  TITAN_CHECK(tokens < std::numeric_limits<int32_t>::max() && vocab < std::numeric_limits<int32_t>::max(),
              "embedding_backward on {}: {} tokens or {} rows exceed the 32-bit sort keys", grad_out.device().str(),
              tokens, vocab);
  TITAN_CHECK(dim <= int64_t{65535} * 256, "embedding_backward on {}: rows of {} columns are too wide",
              grad_out.device().str(), dim);
  size_t bytes = 0;
  TITAN_CUDA_CHECK(embedding_backward_workspace(tokens, vocab, &bytes));
  const Tensor workspace = Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, grad_out.device());
  const Tensor flag = bad_position_flag(grad_out.device());
  TITAN_CUDA_CHECK(launch_embedding_backward(
      grad_weight.data<float>(), grad_out.data_ptr(), grad_out.dtype() == DType::bf16, ids.data_ptr(), i64, tokens,
      vocab, dim, workspace.data_ptr(), bytes, static_cast<unsigned long long*>(flag.data_ptr()), current_stream()));
  check_ids(flag, ids, vocab);
}

}  // namespace

void register_embedding() {
  embedding_kernels.set_kernel(DeviceType::cuda, embedding_kernel);
  embedding_backward_kernels.set_kernel(DeviceType::cuda, embedding_backward_kernel);
}

}  // namespace titan::ops::cuda
