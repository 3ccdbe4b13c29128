// CPU grouped GEMM (ops/grouped_gemm.h). The work is cut into tasks that never
// share an output element: a block of one expert's rows for the two row-wise
// products, a block of one expert's weight rows for the weight gradient (its
// sum over the expert's tokens stays whole, in token order). Tasks run in
// parallel, biggest first, each through oneDNN's sgemm, which runs
// single-threaded inside the parallel region: many small experts keep every
// core busy, where one multithreaded GEMM per expert would leave most idle.
// A task's result does not depend on the thread that runs it. bf16 operands
// are widened into per-thread f32 scratch (exact; oneDNN's C API has no bf16
// GEMM), results rounded once.
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "titan/ops/grouped_gemm.h"

namespace titan::ops::cpu {
namespace {

// Rows per task of the row-wise products, weight rows per task of the weight
// gradient: big enough that sgemm's packing pays off, small enough to split a
// lone large expert across the cores.
constexpr int64_t kRowsPerTask = 256;
constexpr int64_t kWeightRowsPerTask = 64;

struct Task {
  int64_t expert, first, count;  // rows of a (forward, input_grad) or of the weight (weight_grad)
  int64_t cost;
};

float to_float(bf16 v) {
  const uint32_t word = static_cast<uint32_t>(v.bits) << 16;
  float out;
  std::memcpy(&out, &word, sizeof(out));
  return out;
}

// A row-major [rows, columns] block of T (leading dimension ld) as dense f32;
// f32 data is used in place.
template <typename T>
const float* as_f32(const T* data, int64_t rows, int64_t columns, int64_t ld, std::vector<float>& scratch) {
  if constexpr (std::is_same_v<T, float>) {
    (void)rows, (void)columns, (void)scratch;
    (void)ld;
    return data;
  } else {
    scratch.resize(static_cast<size_t>(rows * columns));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < columns; ++c) scratch[static_cast<size_t>(r * columns + c)] = to_float(data[r * ld + c]);
    }
    return scratch.data();
  }
}

template <typename T>
void store(T* out, const float* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>) {
      out[i] = values[i];
    } else {
      uint32_t word;
      std::memcpy(&word, &values[i], sizeof(word));
      const uint32_t rounded = (word + 0x7fffu + ((word >> 16) & 1u)) >> 16;
      out[i] = bf16{static_cast<uint16_t>((word & 0x7fffffffu) > 0x7f800000u ? (word >> 16) | 0x40u : rounded)};
    }
  }
}

template <typename T>
void run(GroupedGemmKind kind, const Tensor& out_tensor, const Tensor& a_tensor, const Tensor& b_tensor,
         const Tensor& counts_tensor) {
  const int64_t experts = counts_tensor.numel();
  const int64_t* counts = counts_tensor.data<int64_t>();
  std::vector<int64_t> offsets(static_cast<size_t>(experts) + 1, 0);
  for (int64_t e = 0; e < experts; ++e) {
    TITAN_CHECK(counts[e] >= 0, "grouped_gemm: expert {} has a negative row count {}", e, counts[e]);
    offsets[static_cast<size_t>(e) + 1] = offsets[static_cast<size_t>(e)] + counts[e];
  }
  const int64_t rows = kind == GroupedGemmKind::weight_grad ? a_tensor.size(0) : out_tensor.size(0);
  TITAN_CHECK(offsets.back() == rows, "grouped_gemm: the expert counts add up to {} rows, the operand has {}",
              offsets.back(), rows);
  const T* a = a_tensor.data<T>();
  const T* b = b_tensor.data<T>();
  T* out = out_tensor.data<T>();
  // forward: a [N, K], b = w [E, O, K], out [N, O]; input_grad: a [N, O], b = w [E, O, K], out [N, K];
  // weight_grad: a = grad_y [N, O], b = x [N, K], out [E, O, K].
  const int64_t a_cols = a_tensor.size(1), b_cols = b_tensor.size(-1);
  const int64_t out_cols = out_tensor.size(-1);

  std::vector<Task> tasks;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t n = counts[e];
    if (kind == GroupedGemmKind::weight_grad) {
      const int64_t weight_rows = out_tensor.size(1);
      for (int64_t first = 0; first < weight_rows; first += kWeightRowsPerTask) {
        const int64_t count = std::min(kWeightRowsPerTask, weight_rows - first);
        tasks.push_back({e, first, count, std::max<int64_t>(n, 1) * count});
      }
    } else {
      for (int64_t first = 0; first < n; first += kRowsPerTask) {
        const int64_t count = std::min(kRowsPerTask, n - first);
        tasks.push_back({e, first, count, count});
      }
    }
  }
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& x, const Task& y) { return x.cost > y.cost; });

  std::atomic<bool> failed{false};
  const int threads = std::max(1, std::min<int>(omp_get_max_threads(), static_cast<int>(tasks.size())));
  // Two threads at least whenever OpenMP offers two: sgemm runs single-threaded
  // only inside an active parallel region, and the result must not depend on that.
#pragma omp parallel num_threads(std::max(threads, std::min(2, omp_get_max_threads())))
  {
    std::vector<float> a_scratch, b_scratch, c(0);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < static_cast<int64_t>(tasks.size()); ++i) {
      const Task& task = tasks[static_cast<size_t>(i)];
      const int64_t e = task.expert, base = offsets[static_cast<size_t>(e)], n = counts[e];
      dnnl_status_t status = dnnl_success;
      if (kind == GroupedGemmKind::weight_grad) {
        // out[e][first..first+count) = a_e[:, first..)^T @ b_e: [count, n] x [n, K]
        const int64_t k_cols = b_cols;
        c.assign(static_cast<size_t>(task.count * k_cols), 0.0f);
        if (n > 0) {
          const float* g = as_f32(a + base * a_cols + task.first, n, task.count, a_cols, a_scratch);
          const float* x = as_f32(b + base * b_cols, n, k_cols, b_cols, b_scratch);
          const int64_t ldg = std::is_same_v<T, float> ? a_cols : task.count;
          status = dnnl_sgemm('T', 'N', task.count, k_cols, n, 1.0f, g, ldg, x, k_cols, 0.0f, c.data(), k_cols);
        }
        store(out + (e * out_tensor.size(1) + task.first) * out_cols, c.data(), task.count * k_cols);
      } else {
        const int64_t w_rows = b_tensor.size(1), w_cols = b_tensor.size(2);
        const float* w = as_f32(b + e * w_rows * w_cols, w_rows, w_cols, w_cols, b_scratch);
        const float* rows_in = as_f32(a + (base + task.first) * a_cols, task.count, a_cols, a_cols, a_scratch);
        c.resize(static_cast<size_t>(task.count * out_cols));
        if (kind == GroupedGemmKind::forward) {  // [count, K] x [O, K]^T
          status = dnnl_sgemm('N', 'T', task.count, out_cols, a_cols, 1.0f, rows_in, a_cols, w, w_cols, 0.0f, c.data(),
                              out_cols);
        } else {  // [count, O] x [O, K]
          status = dnnl_sgemm('N', 'N', task.count, out_cols, a_cols, 1.0f, rows_in, a_cols, w, w_cols, 0.0f, c.data(),
                              out_cols);
        }
        store(out + (base + task.first) * out_cols, c.data(), task.count * out_cols);
      }
      if (status != dnnl_success) failed.store(true, std::memory_order_relaxed);
    }
  }
  TITAN_CHECK(!failed.load(), "grouped_gemm: oneDNN sgemm failed on an expert's block");
  // Experts with no rows still owe a zero weight gradient (their tasks wrote it); row-wise products have no rows to
  // fill.
}

void grouped_gemm_kernel(GroupedGemmKind kind, const Tensor& out, const Tensor& a, const Tensor& b,
                         const Tensor& counts) {
  switch (a.dtype()) {
    case DType::f32:
      run<float>(kind, out, a, b, counts);
      return;
    case DType::bf16:
      run<bf16>(kind, out, a, b, counts);
      return;
    default:
      unsupported_dtype("grouped_gemm", Device::cpu(), a.dtype());
  }
}

}  // namespace

void register_grouped_gemm() { grouped_gemm_kernels.set_kernel(DeviceType::cpu, grouped_gemm_kernel); }

}  // namespace titan::ops::cpu
