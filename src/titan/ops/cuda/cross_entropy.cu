// CUDA cross-entropy over materialised logits, forward and backward: kernels,
// launchers, Tensor plumbing and registration. The formulas are the CPU
// kernel's (see ops/cpu/kernels/cross_entropy.cpp); one block handles one row
// at a time.
//
// The forward returns counted_tokens to the host, so it waits for the stream
// once; that read also carries the target check, which makes a bad target the
// CPU backend's titan::Error. The backward never waits.
#include <cstdint>

#include "titan/ops/cross_entropy.h"
#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"

namespace titan::ops::cuda {
namespace {

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
constexpr unsigned long long kNoBadRow = ~0ULL;

// One block per row of logits (kThreads each), rows grid-strided over at
// most kMaxLogitRowBlocks blocks: more than launch_shape.cuh's row_blocks.
constexpr int64_t kMaxLogitRowBlocks = 1 << 20;

unsigned int logit_row_blocks(int64_t rows) {
  return static_cast<unsigned int>(rows < 1 ? 1 : (rows < kMaxLogitRowBlocks ? rows : kMaxLogitRowBlocks));
}

template <typename Target>
__device__ __forceinline__ bool in_vocab(Target target, int64_t vocab) {
  return target >= 0 && static_cast<int64_t>(target) < vocab;
}

// Per row: lse = max + log(sum exp(z - max)) in one read of the logits (each
// thread keeps a running max and a sum rescaled when the max grows, then the
// block combines them), and the row's loss, 0 for an ignored row.
template <typename T, typename Target>
__global__ void __launch_bounds__(kThreads)
    rows_forward(const T* logits, const Target* targets, int64_t rows, int64_t vocab, CrossEntropyParams params,
                 float* lse, float* row_loss, unsigned long long* bad_row) {
  __shared__ float scratch[kWarpSize];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * vocab;
    float running_max = -INFINITY, running_sum = 0.0f;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      const float z = capped(load_f32(x, j), params.softcap);
      if (z > running_max) {
        running_sum = running_sum * expf(running_max - z) + 1.0f;
        running_max = z;
      } else if (running_max != -INFINITY) {  // else z is -inf too and adds nothing (and -inf - -inf is NaN)
        running_sum += expf(z - running_max);
      }
    }
    const float row_max = block_max(running_max, scratch);
    const float share = running_max == -INFINITY ? 0.0f : running_sum * expf(running_max - row_max);
    const float row_lse = row_max + logf(block_sum(share, scratch));
    if (threadIdx.x != 0) continue;
    lse[row] = row_lse;
    const Target target = targets[row];
    float loss = 0.0f;
    if (target != params.ignore_index) {
      if (in_vocab(target, vocab)) {
        const float target_logit = capped(load_f32(x, static_cast<int64_t>(target)), params.softcap);
        loss = row_lse - target_logit + params.z_loss * row_lse * row_lse;
      } else {
        atomicMin(bad_row, static_cast<unsigned long long>(row));
      }
    }
    row_loss[row] = loss;
  }
}

// Sums the row losses in double and counts the counted rows (exact in double
// up to 2^53), in an order fixed by the block shape; then reduces as the CPU.
template <typename Target>
__global__ void __launch_bounds__(kFinishThreads)
    finish_forward(const float* row_loss, const Target* targets, int64_t rows, CrossEntropyParams params, float* loss,
                   CrossEntropyStatus* status) {
  __shared__ double scratch[kWarpSize];
  double total = 0.0, counted = 0.0;
  for (int64_t row = threadIdx.x; row < rows; row += kFinishThreads) {
    total += row_loss[row];
    counted += targets[row] != params.ignore_index ? 1.0 : 0.0;
  }
  total = block_sum(total, scratch);
  counted = block_sum(counted, scratch);
  if (threadIdx.x != 0) return;
  *loss = counted == 0.0 ? 0.0f : static_cast<float>(params.mean ? total / counted : total);
  status->counted = static_cast<unsigned long long>(counted);
}

template <typename T, typename Target>
cudaError_t forward(float* loss, float* lse, const T* logits, const Target* targets, int64_t rows, int64_t vocab,
                    const CrossEntropyParams& params, float* row_loss, CrossEntropyStatus* status,
                    cudaStream_t stream) {
  if (rows > 0) {
    rows_forward<<<logit_row_blocks(rows), kThreads, 0, stream>>>(logits, targets, rows, vocab, params, lse, row_loss,
                                                                  &status->bad_row);
  }
  finish_forward<<<1, kFinishThreads, 0, stream>>>(row_loss, targets, rows, params, loss, status);
  return cudaGetLastError();
}

// d(loss)/dx_j = (softmax_j (1 + 2 z_loss lse) - [j == target]) * scale * (1 - (z_j / cap)^2),
// scale = grad_loss / counted (mean) or grad_loss (sum), as the CPU computes it.
template <typename T, typename Target>
__global__ void __launch_bounds__(kThreads)
    rows_backward(T* grad, const T* logits, const Target* targets, const float* lse, const float* grad_loss,
                  int64_t counted, int64_t rows, int64_t vocab, CrossEntropyParams params) {
  const float scale = counted == 0 ? 0.0f : (params.mean ? *grad_loss / static_cast<float>(counted) : *grad_loss);
  const float inverse_cap = params.softcap > 0.0f ? 1.0f / params.softcap : 0.0f;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * vocab;
    T* out = grad + row * vocab;
    const Target target = targets[row];
    if (target == params.ignore_index || !in_vocab(target, vocab)) {
      // Exactly zero for an ignored row, never 0 * NaN; NaN marks a bad target.
      const float fill = target == params.ignore_index ? 0.0f : NAN;
      for (int64_t j = threadIdx.x; j < vocab; j += kThreads) store_f32(out, j, fill);
      continue;
    }
    const float row_lse = lse[row];
    const float prob_scale = (1.0f + 2.0f * params.z_loss * row_lse) * scale;
    const auto column = static_cast<int64_t>(target);
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
      const float z = capped(load_f32(x, j), params.softcap);
      float g = expf(z - row_lse) * prob_scale - (j == column ? scale : 0.0f);
      if (params.softcap > 0.0f) {
        const float ratio = z * inverse_cap;
        g = g * (1.0f - ratio * ratio);
      }
      store_f32(out, j, g);
    }
  }
}

template <typename T, typename Target>
cudaError_t backward(T* grad, const T* logits, const Target* targets, const float* lse, const float* grad_loss,
                     int64_t counted, int64_t rows, int64_t vocab, const CrossEntropyParams& params,
                     cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  rows_backward<<<logit_row_blocks(rows), kThreads, 0, stream>>>(grad, logits, targets, lse, grad_loss, counted, rows,
                                                                 vocab, params);
  return cudaGetLastError();
}

// lse[row] for every row, *loss (reduced as params say, 0 when nothing is
// counted) and *status. `row_loss` is scratch for `rows` floats.
cudaError_t launch_cross_entropy(float* loss, float* lse, const void* logits, bool logits_bf16, const void* targets,
                                 bool targets_i64, int64_t rows, int64_t vocab, const CrossEntropyParams& params,
                                 float* row_loss, CrossEntropyStatus* status, cudaStream_t stream) {
  const cudaError_t cleared = cudaMemsetAsync(&status->bad_row, 0xff, sizeof(status->bad_row), stream);
  if (cleared != cudaSuccess) return cleared;
  const auto* i64 = static_cast<const int64_t*>(targets);
  const auto* i32 = static_cast<const int32_t*>(targets);
  if (logits_bf16) {
    const auto* x = static_cast<const __nv_bfloat16*>(logits);
    return targets_i64 ? forward(loss, lse, x, i64, rows, vocab, params, row_loss, status, stream)
                       : forward(loss, lse, x, i32, rows, vocab, params, row_loss, status, stream);
  }
  const auto* x = static_cast<const float*>(logits);
  return targets_i64 ? forward(loss, lse, x, i64, rows, vocab, params, row_loss, status, stream)
                     : forward(loss, lse, x, i32, rows, vocab, params, row_loss, status, stream);
}

// grad (logits' dtype) = d(loss)/d(logits) * *grad_loss, read on the device.
// Ignored rows get zeros; a row whose target is outside [0, vocab) gets NaN
// (the backward cannot raise an error without waiting for the device).
cudaError_t launch_cross_entropy_backward(void* grad, const void* logits, bool logits_bf16, const void* targets,
                                          bool targets_i64, const float* lse, const float* grad_loss, int64_t counted,
                                          int64_t rows, int64_t vocab, const CrossEntropyParams& params,
                                          cudaStream_t stream) {
  const auto* i64 = static_cast<const int64_t*>(targets);
  const auto* i32 = static_cast<const int32_t*>(targets);
  if (logits_bf16) {
    auto* g = static_cast<__nv_bfloat16*>(grad);
    const auto* x = static_cast<const __nv_bfloat16*>(logits);
    return targets_i64 ? backward(g, x, i64, lse, grad_loss, counted, rows, vocab, params, stream)
                       : backward(g, x, i32, lse, grad_loss, counted, rows, vocab, params, stream);
  }
  auto* g = static_cast<float*>(grad);
  const auto* x = static_cast<const float*>(logits);
  return targets_i64 ? backward(g, x, i64, lse, grad_loss, counted, rows, vocab, params, stream)
                     : backward(g, x, i32, lse, grad_loss, counted, rows, vocab, params, stream);
}

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
