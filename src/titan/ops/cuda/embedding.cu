// CUDA embedding lookup and its deterministic scatter-add backward: kernels,
// launchers, Tensor plumbing and registration.
//
// Both validate the ids on the device: an id outside [0, vocab) touches no
// memory and lowers *bad_position (which the launcher first sets to
// kNoBadPosition) to the first position holding one; the host reads that
// verdict back, so a bad id is the CPU backend's titan::Error.
#include <cub/cub.cuh>

#include <cstdint>
#include <limits>

#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/device_math.cuh"
#include "titan/ops/cuda/launch_shape.cuh"
#include "titan/ops/cuda/stream.h"
#include "titan/ops/embedding.h"

namespace titan::ops::cuda {
namespace {

constexpr unsigned long long kNoBadPosition = ~0ULL;

template <typename Id>
__device__ __forceinline__ bool valid_id(Id id, int64_t vocab) {
  return id >= 0 && static_cast<int64_t>(id) < vocab;
}

// One block per token copies its row in `Unit`s (the widest word the row
// size and alignment allow).
template <typename Unit, typename Id>
__global__ void gather_rows(Unit* out, const Unit* weight, int64_t vocab, int64_t units, const Id* ids, int64_t tokens,
                            unsigned long long* bad_position) {
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const Id id = ids[t];
    if (!valid_id(id, vocab)) {
      if (threadIdx.x == 0) atomicMin(bad_position, static_cast<unsigned long long>(t));
      continue;
    }
    const Unit* src = weight + static_cast<int64_t>(id) * units;
    Unit* dst = out + t * units;
    for (int64_t c = threadIdx.x; c < units; c += blockDim.x) dst[c] = src[c];
  }
}

template <typename Unit, typename Id>
cudaError_t gather(void* out, const void* weight, int64_t vocab, int64_t row_bytes, const Id* ids, int64_t tokens,
                   unsigned long long* bad_position, cudaStream_t stream) {
  const int64_t units = row_bytes / static_cast<int64_t>(sizeof(Unit));
  gather_rows<<<row_blocks(tokens), threads_for(units), 0, stream>>>(
      static_cast<Unit*>(out), static_cast<const Unit*>(weight), vocab, units, ids, tokens, bad_position);
  return cudaGetLastError();
}

template <typename Id>
cudaError_t gather_ids(void* out, const void* weight, int64_t vocab, int64_t row_bytes, const Id* ids, int64_t tokens,
                       unsigned long long* bad_position, cudaStream_t stream) {
  const auto fits = [&](size_t unit) {
    return row_bytes % static_cast<int64_t>(unit) == 0 && reinterpret_cast<uintptr_t>(out) % unit == 0 &&
           reinterpret_cast<uintptr_t>(weight) % unit == 0;
  };
  if (fits(16)) return gather<uint4>(out, weight, vocab, row_bytes, ids, tokens, bad_position, stream);
  if (fits(8)) return gather<uint2>(out, weight, vocab, row_bytes, ids, tokens, bad_position, stream);
  if (fits(4)) return gather<uint32_t>(out, weight, vocab, row_bytes, ids, tokens, bad_position, stream);
  if (fits(2)) return gather<uint16_t>(out, weight, vocab, row_bytes, ids, tokens, bad_position, stream);
  return gather<uint8_t>(out, weight, vocab, row_bytes, ids, tokens, bad_position, stream);
}

// ---- backward --------------------------------------------------------------

// Sort keys hold ids in [0, vocab] (vocab marks a bad id, so those sort last
// as one run that is skipped); only the low id_key_bits(vocab) bits are sorted.
int id_key_bits(int64_t vocab) {
  int bits = 1;
  while ((int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

// The backward's workspace, each piece 256-byte aligned.
struct BackwardWorkspace {
  uint32_t* keys_in;
  uint32_t* keys_out;
  int32_t* order_in;   // 0, 1, ..., tokens - 1: token positions, also the run-start candidates
  int32_t* order_out;  // token positions sorted (stably) by id
  uint8_t* run_flags;  // 1 where a run of equal ids starts in the sorted order
  int32_t* run_starts;
  int32_t* num_runs;
  void* temp;  // CUB's scratch, shared by the sort and the select (they run one after the other)
  size_t temp_bytes;
  size_t total;
};

BackwardWorkspace carve_backward_workspace(char* base, int64_t tokens, size_t temp_bytes) {
  size_t offset = 0;
  const auto take = [&](size_t bytes) {
    char* p = base == nullptr ? nullptr : base + offset;
    offset += (bytes + 255) / 256 * 256;
    return p;
  };
  const auto n = static_cast<size_t>(tokens);
  BackwardWorkspace w{};
  w.keys_in = reinterpret_cast<uint32_t*>(take(n * sizeof(uint32_t)));
  w.keys_out = reinterpret_cast<uint32_t*>(take(n * sizeof(uint32_t)));
  w.order_in = reinterpret_cast<int32_t*>(take(n * sizeof(int32_t)));
  w.order_out = reinterpret_cast<int32_t*>(take(n * sizeof(int32_t)));
  w.run_flags = reinterpret_cast<uint8_t*>(take(n));
  w.run_starts = reinterpret_cast<int32_t*>(take(n * sizeof(int32_t)));
  w.num_runs = reinterpret_cast<int32_t*>(take(sizeof(int32_t)));
  w.temp = take(temp_bytes);
  w.temp_bytes = temp_bytes;
  w.total = offset;
  return w;
}

cudaError_t cub_temp_bytes(int64_t tokens, int64_t vocab, size_t* bytes) {
  size_t sort_bytes = 0, select_bytes = 0;
  const int n = static_cast<int>(tokens);
  cudaError_t status = cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, id_key_bits(vocab));
  if (status != cudaSuccess) return status;
  status = cub::DeviceSelect::Flagged(nullptr, select_bytes, static_cast<const int32_t*>(nullptr),
                                      static_cast<const uint8_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                      static_cast<int32_t*>(nullptr), tokens);
  *bytes = sort_bytes > select_bytes ? sort_bytes : select_bytes;
  return status;
}

template <typename Id>
__global__ void make_keys(const Id* ids, int64_t tokens, int64_t vocab, uint32_t* keys, int32_t* order,
                          unsigned long long* bad_position) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Id id = ids[t];
    if (valid_id(id, vocab)) {
      keys[t] = static_cast<uint32_t>(id);
    } else {
      keys[t] = static_cast<uint32_t>(vocab);
      atomicMin(bad_position, static_cast<unsigned long long>(t));
    }
    order[t] = static_cast<int32_t>(t);
  }
}

__global__ void flag_run_starts(const uint32_t* keys, int64_t tokens, uint8_t* flags) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < tokens;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    flags[i] = i == 0 || keys[i] != keys[i - 1];
  }
}

// Block (x, y) sums runs x, x + gridDim.x, ... over columns [y * blockDim.x,
// (y + 1) * blockDim.x): each thread one column, its run's rows in token order.
template <typename G>
__global__ void accumulate_runs(float* grad_weight, const G* grad_out, int64_t vocab, int64_t dim, const uint32_t* keys,
                                const int32_t* order, const int32_t* run_starts, const int32_t* num_runs,
                                int64_t tokens) {
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  const int runs = *num_runs;
  for (int r = blockIdx.x; r < runs; r += gridDim.x) {
    const int64_t begin = run_starts[r], end = r + 1 < runs ? run_starts[r + 1] : tokens;
    const uint32_t id = keys[begin];
    if (id >= vocab) continue;  // the bad ids' run: reported by the host
    float* row = grad_weight + static_cast<int64_t>(id) * dim;
    float acc = row[c];
    for (int64_t k = begin; k < end; ++k) acc += load_f32(grad_out, static_cast<int64_t>(order[k]) * dim + c);
    row[c] = acc;
  }
}

template <typename Id>
cudaError_t backward_ids(float* grad_weight, const void* grad_out, bool grad_bf16, const Id* ids, int64_t tokens,
                         int64_t vocab, int64_t dim, const BackwardWorkspace& w, unsigned long long* bad_position,
                         cudaStream_t stream) {
  const unsigned int grid = grid_for(tokens, kThreads);
  make_keys<<<grid, kThreads, 0, stream>>>(ids, tokens, vocab, w.keys_in, w.order_in, bad_position);
  size_t temp_bytes = w.temp_bytes;
  cudaError_t status =
      cub::DeviceRadixSort::SortPairs(w.temp, temp_bytes, w.keys_in, w.keys_out, w.order_in, w.order_out,
                                      static_cast<int>(tokens), 0, id_key_bits(vocab), stream);
  if (status != cudaSuccess) return status;
  flag_run_starts<<<grid, kThreads, 0, stream>>>(w.keys_out, tokens, w.run_flags);
  temp_bytes = w.temp_bytes;
  // The argument types of cub_temp_bytes, so CUB picks the same configuration (and scratch size).
  status =
      cub::DeviceSelect::Flagged(w.temp, temp_bytes, static_cast<const int32_t*>(w.order_in),
                                 static_cast<const uint8_t*>(w.run_flags), w.run_starts, w.num_runs, tokens, stream);
  if (status != cudaSuccess || dim == 0) return status;
  const int threads = threads_for(dim);
  const dim3 blocks(row_blocks(tokens), static_cast<unsigned int>((dim + threads - 1) / threads));
  if (grad_bf16) {
    accumulate_runs<<<blocks, threads, 0, stream>>>(grad_weight, static_cast<const __nv_bfloat16*>(grad_out), vocab,
                                                    dim, w.keys_out, w.order_out, w.run_starts, w.num_runs, tokens);
  } else {
    accumulate_runs<<<blocks, threads, 0, stream>>>(grad_weight, static_cast<const float*>(grad_out), vocab, dim,
                                                    w.keys_out, w.order_out, w.run_starts, w.num_runs, tokens);
  }
  return cudaGetLastError();
}

// out[t] = weight[ids[t]], rows of row_bytes bytes (any dtype); ids i32 or i64.
cudaError_t launch_embedding(void* out, const void* weight, int64_t vocab, int64_t row_bytes, const void* ids,
                             bool ids_i64, int64_t tokens, unsigned long long* bad_position, cudaStream_t stream) {
  cudaError_t status = cudaMemsetAsync(bad_position, 0xff, sizeof(*bad_position), stream);
  if (status != cudaSuccess || tokens == 0) return status;
  return ids_i64
             ? gather_ids(out, weight, vocab, row_bytes, static_cast<const int64_t*>(ids), tokens, bad_position, stream)
             : gather_ids(out, weight, vocab, row_bytes, static_cast<const int32_t*>(ids), tokens, bad_position,
                          stream);
}

// Bytes of device workspace launch_embedding_backward needs.
cudaError_t embedding_backward_workspace(int64_t tokens, int64_t vocab, size_t* bytes) {
  size_t temp_bytes = 0;
  const cudaError_t status = cub_temp_bytes(tokens, vocab, &temp_bytes);
  *bytes = carve_backward_workspace(nullptr, tokens, temp_bytes).total;
  return status;
}

// grad_weight[v] (f32, [vocab, dim]) += the grad_out rows (f32 or bf16) of the
// tokens whose id is v, added in token order: ids are stable-sorted, and each
// distinct id's rows are summed by one thread per column. No atomics.
cudaError_t launch_embedding_backward(float* grad_weight, const void* grad_out, bool grad_bf16, const void* ids,
                                      bool ids_i64, int64_t tokens, int64_t vocab, int64_t dim, void* workspace,
                                      size_t workspace_bytes, unsigned long long* bad_position, cudaStream_t stream) {
  cudaError_t status = cudaMemsetAsync(bad_position, 0xff, sizeof(*bad_position), stream);
  if (status != cudaSuccess || tokens == 0) return status;
  size_t temp_bytes = 0;
  if ((status = cub_temp_bytes(tokens, vocab, &temp_bytes)) != cudaSuccess) return status;
  const BackwardWorkspace w = carve_backward_workspace(static_cast<char*>(workspace), tokens, temp_bytes);
  if (w.total > workspace_bytes) return cudaErrorInvalidValue;
  return ids_i64 ? backward_ids(grad_weight, grad_out, grad_bf16, static_cast<const int64_t*>(ids), tokens, vocab, dim,
                                w, bad_position, stream)
                 : backward_ids(grad_weight, grad_out, grad_bf16, static_cast<const int32_t*>(ids), tokens, vocab, dim,
                                w, bad_position, stream);
}

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
