// CUDA cross-entropy over materialised logits, forward and backward (see
// cross_entropy_kernels.cuh). The forward returns counted_tokens to the host,
// so it waits for the stream once; that read also carries the target check,
// which makes a bad target the CPU backend's titan::Error. The backward
// never waits.
#include "titan/ops/cross_entropy.h"
#include "titan/ops/cuda/cross_entropy_kernels.cuh"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

CrossEntropyParams params_of(const CrossEntropyOptions& options) {
  return {options.ignore_index, options.softcap, options.z_loss, options.mean};
}

bool logits_are_bf16(const char* op, const Tensor& logits) {
  if (logits.dtype() != DType::f32 && logits.dtype() != DType::bf16) {
    unsupported_dtype(op, logits.device(), logits.dtype());
  }
  return logits.dtype() == DType::bf16;
}

bool targets_are_i64(const char* op, const Tensor& targets) {
  if (targets.dtype() != DType::i32 && targets.dtype() != DType::i64) {
    unsupported_dtype(op, targets.device(), targets.dtype());
  }
  return targets.dtype() == DType::i64;
}

int64_t read_target(const Tensor& targets, int64_t row, cudaStream_t stream) {
  int64_t value = 0;
  int32_t value32 = 0;
  const bool i64 = targets.dtype() == DType::i64;
  TITAN_CUDA_CHECK(cudaMemcpyAsync(i64 ? static_cast<void*>(&value) : static_cast<void*>(&value32),
                                   static_cast<const char*>(targets.data_ptr()) + row * targets.element_size(),
                                   targets.element_size(), cudaMemcpyDeviceToHost, stream));
  TITAN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return i64 ? value : value32;
}

void cross_entropy_kernel(CrossEntropyOutput& result, const Tensor& logits, const Tensor& targets,
                          const CrossEntropyOptions& options) {
  const bool bf16 = logits_are_bf16("cross_entropy", logits);
  const bool i64 = targets_are_i64("cross_entropy", targets);
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  cudaStream_t stream = current_stream();
  const Tensor row_loss = Tensor::empty({rows}, DType::f32, logits.device());
  const Tensor status = Tensor::empty({2}, DType::i64, logits.device());  // a CrossEntropyStatus
  auto* device_status = static_cast<CrossEntropyStatus*>(status.data_ptr());
  TITAN_CUDA_CHECK(launch_cross_entropy(result.loss.data<float>(), result.lse.data<float>(), logits.data_ptr(), bf16,
                                        targets.data_ptr(), i64, rows, vocab, params_of(options),
                                        row_loss.data<float>(), device_status, stream));
  CrossEntropyStatus host{};
  TITAN_CUDA_CHECK(cudaMemcpyAsync(&host, device_status, sizeof(host), cudaMemcpyDeviceToHost, stream));
  TITAN_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host.bad_row != kNoBadRow) {
    const auto row = static_cast<int64_t>(host.bad_row);
    fail("{}: target {} at row {} is outside the vocabulary [0, {}) and is not ignore_index ({})", "cross_entropy",
         read_target(targets, row, stream), row, vocab, options.ignore_index);
  }
  result.counted_tokens = static_cast<int64_t>(host.counted);
}

void cross_entropy_backward_kernel(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                   const Tensor& targets, const Tensor& lse, int64_t counted_tokens,
                                   const CrossEntropyOptions& options) {
  const bool bf16 = logits_are_bf16("cross_entropy_backward", logits);
  const bool i64 = targets_are_i64("cross_entropy_backward", targets);
  TITAN_CHECK(lse.device() == logits.device(), "cross_entropy_backward: lse on {} but logits on {}", lse.device().str(),
              logits.device().str());
  // The kernel reads grad_loss on the device (no wait for its value); a host scalar is moved there first.
  const Tensor scale = grad_loss.device() == logits.device() ? grad_loss : grad_loss.to(logits.device());
  TITAN_CUDA_CHECK(launch_cross_entropy_backward(grad_logits.data_ptr(), logits.data_ptr(), bf16, targets.data_ptr(),
                                                 i64, lse.data<float>(), scale.data<float>(), counted_tokens,
                                                 logits.size(0), logits.size(1), params_of(options), current_stream()));
}

}  // namespace

void register_cross_entropy() {
  cross_entropy_kernels.set_kernel(DeviceType::cuda, cross_entropy_kernel);
  cross_entropy_backward_kernels.set_kernel(DeviceType::cuda, cross_entropy_backward_kernel);
}

}  // namespace titan::ops::cuda
