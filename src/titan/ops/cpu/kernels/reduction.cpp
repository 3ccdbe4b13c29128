// CPU reductions. Inputs are cut into fixed blocks of kBlock elements; each
// block is reduced with 16 independent f32 lanes (vectorisable), and block
// results are combined in double in block order. The partitioning depends
// only on the size, so the result is the same for every thread count.
#include <limits>
#include <vector>

#include "titan/ops/reduction.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

constexpr int64_t kBlock = 4096;
constexpr int kLanes = 16;

template <typename T>
double block_sum(const T* x, int64_t n, bool squares) {
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float v = to_f32(x[i + l]);
      lanes[l] += squares ? v * v : v;
    }
  }
  double total = 0.0;
  for (int l = 0; l < kLanes; ++l) total += lanes[l];
  for (; i < n; ++i) {
    const double v = to_f32(x[i]);
    total += squares ? v * v : v;
  }
  return total;
}

// NaN if any element is NaN (as torch.max), else the largest: std::max alone
// would skip a NaN that is not its first argument.
template <typename T>
float block_max(const T* x, int64_t n) {
  float best = -std::numeric_limits<float>::infinity();
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const float v = to_f32(x[i]);
    nan = nan || std::isnan(v);
    best = std::max(best, v);
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : best;
}

// Reduces a contiguous buffer; `max` ignores `squares`.
template <typename T>
double reduce_buffer(const T* x, int64_t n, bool max, bool squares) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  parallel_for(blocks, 4, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t start = b * kBlock, count = std::min(kBlock, n - start);
      partial[static_cast<size_t>(b)] = max ? block_max(x + start, count) : block_sum(x + start, count, squares);
    }
  });
  double result = max ? -std::numeric_limits<double>::infinity() : 0.0;
  for (double value : partial) result = max ? (std::isnan(value) ? value : std::max(result, value)) : result + value;
  return result;
}

void reduce_kernel(ReduceOp op, const Tensor& out, const Tensor& x) {
  dispatch_float("reduce", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = x.numel();
    double value = reduce_buffer(x.data<T>(), n, op == ReduceOp::max, op == ReduceOp::sum_squares);
    if (op == ReduceOp::mean) value /= static_cast<double>(n);
    *out.data<float>() = static_cast<float>(value);
  });
}

void global_l2_norm_kernel(const Tensor& out, std::span<const Tensor> tensors) {
  double total = 0.0;
  for (const Tensor& t : tensors) {
    dispatch_float("global_l2_norm", t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      total += reduce_buffer(t.data<T>(), t.numel(), false, true);
    });
  }
  *out.data<float>() = static_cast<float>(std::sqrt(total));
}

// out (shape S) = sum of x (shape broadcast from S) over the broadcast dims.
// Single-threaded: only the naive reference paths use it.
void sum_to_shape_kernel(const Tensor& out, const Tensor& x) {
  dispatch_float("sum_to_shape", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t rank = x.dim();
    const int64_t lead = rank - out.dim();
    std::vector<int64_t> out_stride(static_cast<size_t>(rank), 0);
    for (int64_t d = lead; d < rank; ++d) {
      if (out.size(d - lead) != 1) out_stride[static_cast<size_t>(d)] = out.stride(d - lead);
    }
    std::vector<double> accumulator(static_cast<size_t>(out.numel()), 0.0);
    std::vector<int64_t> index(static_cast<size_t>(rank), 0);
    const T* in = x.data<T>();
    int64_t target = 0;
    for (int64_t n = 0; n < x.numel(); ++n) {
      accumulator[static_cast<size_t>(target)] += to_f32(in[n]);
      for (int64_t d = rank - 1; d >= 0; --d) {
        target += out_stride[static_cast<size_t>(d)];
        if (++index[static_cast<size_t>(d)] < x.size(d)) break;
        target -= out_stride[static_cast<size_t>(d)] * x.size(d);
        index[static_cast<size_t>(d)] = 0;
      }
    }
    T* o = out.data<T>();
    for (size_t i = 0; i < accumulator.size(); ++i) o[i] = from_f32<T>(static_cast<float>(accumulator[i]));
  });
}

}  // namespace

void register_reduction() {
  reduce_kernels.set_kernel(DeviceType::cpu, reduce_kernel);
  global_l2_norm_kernels.set_kernel(DeviceType::cpu, global_l2_norm_kernel);
  sum_to_shape_kernels.set_kernel(DeviceType::cpu, sum_to_shape_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
