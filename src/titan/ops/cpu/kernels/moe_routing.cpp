// CPU mixture-of-experts routing (see ops/moe_routing.h). Top-k is a running
// insertion per row (k is at most a few dozen). The expert order is one
// sequential counting sort: T*k increments, cheaper than any parallel
// scheme's bookkeeping at these sizes, and stable by construction. Row moves
// and the combine run in parallel over tokens, and each token's slots are
// summed in slot order, so the same bits come out for any thread count.
#include <cmath>
#include <cstring>
#include <vector>

#include "titan/ops/moe_routing.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

bool ranks_above(float a, float b) { return std::isnan(a) ? !std::isnan(b) : a > b; }

void topk_kernel(const Tensor& values, const Tensor& indices, const Tensor& scores) {
  const int64_t rows = scores.size(0), columns = scores.size(1), k = values.size(1);
  const float* s = scores.data<float>();
  float* v = values.data<float>();
  int64_t* index = indices.data<int64_t>();
  parallel_for(rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* best = v + r * k;
      int64_t* where = index + r * k;
      int64_t filled = 0;
      for (int64_t c = 0; c < columns; ++c) {
        const float value = s[r * columns + c];
        // Strictly greater moves an entry down: equal scores keep the lower index
        // first. NaN ranks above every number, as in torch.topk, so a NaN router
        // score is chosen and reaches the token's output instead of vanishing.
        int64_t at = filled;
        while (at > 0 && ranks_above(value, best[at - 1])) --at;
        if (at >= k) continue;
        for (int64_t j = std::min(filled, k - 1); j > at; --j) {
          best[j] = best[j - 1];
          where[j] = where[j - 1];
        }
        best[at] = value;
        where[at] = c;
        if (filled < k) ++filled;
      }
    }
  });
}

// Each token on its own: group scores (sum of the two largest, NaN ranking
// above every number as in topk_kernel), then `kept` passes each taking the
// best group not yet taken (the lower group on ties), then the copy with
// every other group's entries zeroed.
void limit_to_groups_kernel(const Tensor& out, const Tensor& choice, int64_t groups, int64_t kept) {
  const int64_t rows = choice.size(0), experts = choice.size(1), per_group = experts / groups;
  const float* c = choice.data<float>();
  float* o = out.data<float>();
  parallel_for(rows, 64, [&](int64_t begin, int64_t end) {
    float score[kMaxExpertGroups];
    bool taken[kMaxExpertGroups];
    for (int64_t r = begin; r < end; ++r) {
      const float* row = c + r * experts;
      for (int64_t g = 0; g < groups; ++g) {
        float best = -INFINITY, second = -INFINITY;
        for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
          if (ranks_above(row[e], best)) {
            second = best;
            best = row[e];
          } else if (ranks_above(row[e], second)) {
            second = row[e];
          }
        }
        score[g] = best + second;
        taken[g] = false;
      }
      for (int64_t pass = 0; pass < kept; ++pass) {
        int64_t pick = -1;
        for (int64_t g = 0; g < groups; ++g) {
          if (!taken[g] && (pick < 0 || ranks_above(score[g], score[pick]))) pick = g;
        }
        taken[pick] = true;
      }
      for (int64_t e = 0; e < experts; ++e) o[r * experts + e] = taken[e / per_group] ? row[e] : 0.0f;
    }
  });
}

void expert_order_kernel(const Tensor& order, const Tensor& inverse, const Tensor& counts, const Tensor& indices) {
  const int64_t pairs = indices.numel(), experts = counts.numel();
  const int64_t* expert = indices.data<int64_t>();
  int64_t* count = counts.data<int64_t>();
  std::fill(count, count + experts, int64_t{0});
  for (int64_t p = 0; p < pairs; ++p) {
    TITAN_CHECK(expert[p] >= 0 && expert[p] < experts, "expert_order: expert {} at pair {} is outside [0, {})",
                expert[p], p, experts);
    ++count[expert[p]];
  }
  std::vector<int64_t> next(static_cast<size_t>(experts));
  int64_t offset = 0;
  for (int64_t e = 0; e < experts; ++e) {
    next[static_cast<size_t>(e)] = offset;
    offset += count[e];
  }
  int64_t* ordered = order.data<int64_t>();
  int64_t* position = inverse.data<int64_t>();
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t at = next[static_cast<size_t>(expert[p])]++;
    ordered[at] = p;
    position[p] = at;
  }
}

void permute_tokens_kernel(const Tensor& rows, const Tensor& x, const Tensor& order, int64_t k) {
  const size_t row_bytes = static_cast<size_t>(x.size(1)) * x.element_size();
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(rows.data_ptr());
  const int64_t* ordered = order.data<int64_t>();
  parallel_for(rows.size(0), 64, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      std::memcpy(dst + static_cast<size_t>(p) * row_bytes, src + static_cast<size_t>(ordered[p] / k) * row_bytes,
                  row_bytes);
    }
  });
}

template <typename T>
void unpermute_sum_rows(T* grad_x, const T* grad_rows, const int64_t* inverse, int64_t tokens, int64_t k, int64_t dim) {
  parallel_for(tokens, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> sum(static_cast<size_t>(dim));
    for (int64_t t = begin; t < end; ++t) {
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int64_t s = 0; s < k; ++s) {
        const T* row = grad_rows + inverse[t * k + s] * dim;
#pragma omp simd
        for (int64_t d = 0; d < dim; ++d) sum[static_cast<size_t>(d)] += to_f32(row[d]);
      }
      T* out = grad_x + t * dim;
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) out[d] = from_f32<T>(sum[static_cast<size_t>(d)]);
    }
  });
}

void unpermute_sum_kernel(const Tensor& grad_x, const Tensor& grad_rows, const Tensor& inverse, int64_t k) {
  dispatch_float("unpermute_sum", grad_rows.dtype(), [&](auto tag) {
    using T = decltype(tag);
    unpermute_sum_rows(grad_x.data<T>(), grad_rows.data<T>(), inverse.data<int64_t>(), grad_x.size(0), k,
                       grad_x.size(1));
  });
}

template <typename T>
void combine_rows(T* out, const T* rows, const int64_t* inverse, const float* weights, int64_t tokens, int64_t k,
                  int64_t dim) {
  parallel_for(tokens, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> sum(static_cast<size_t>(dim));
    for (int64_t t = begin; t < end; ++t) {
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int64_t s = 0; s < k; ++s) {
        const T* row = rows + inverse[t * k + s] * dim;
        const float w = weights[t * k + s];
#pragma omp simd
        for (int64_t d = 0; d < dim; ++d) sum[static_cast<size_t>(d)] += w * to_f32(row[d]);
      }
      T* o = out + t * dim;
#pragma omp simd
      for (int64_t d = 0; d < dim; ++d) o[d] = from_f32<T>(sum[static_cast<size_t>(d)]);
    }
  });
}

void combine_experts_kernel(const Tensor& out, const Tensor& rows, const Tensor& inverse, const Tensor& weights) {
  dispatch_float("combine_experts", rows.dtype(), [&](auto tag) {
    using T = decltype(tag);
    combine_rows(out.data<T>(), rows.data<T>(), inverse.data<int64_t>(), weights.data<float>(), weights.size(0),
                 weights.size(1), rows.size(1));
  });
}

template <typename T>
void combine_rows_backward(T* grad_rows, float* grad_weights, const T* grad_out, const T* rows, const int64_t* inverse,
                           const float* weights, int64_t tokens, int64_t k, int64_t dim) {
  parallel_for(tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const T* g = grad_out + t * dim;
      for (int64_t s = 0; s < k; ++s) {
        const int64_t at = inverse[t * k + s];
        const T* row = rows + at * dim;
        T* grad_row = grad_rows + at * dim;
        const float w = weights[t * k + s];
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t d = 0; d < dim; ++d) {
          const float gd = to_f32(g[d]);
          grad_row[d] = from_f32<T>(w * gd);
          dot += gd * to_f32(row[d]);
        }
        grad_weights[t * k + s] = dot;
      }
    }
  });
}

void combine_experts_backward_kernel(const Tensor& grad_rows, const Tensor& grad_weights, const Tensor& grad_out,
                                     const Tensor& rows, const Tensor& inverse, const Tensor& weights) {
  dispatch_float("combine_experts_backward", rows.dtype(), [&](auto tag) {
    using T = decltype(tag);
    combine_rows_backward(grad_rows.data<T>(), grad_weights.data<float>(), grad_out.data<T>(), rows.data<T>(),
                          inverse.data<int64_t>(), weights.data<float>(), weights.size(0), weights.size(1),
                          rows.size(1));
  });
}

void gather_columns_kernel(const Tensor& out, const Tensor& x, const Tensor& indices) {
  const int64_t rows = x.size(0), columns = x.size(1), k = indices.size(1);
  const float* src = x.data<float>();
  const int64_t* index = indices.data<int64_t>();
  float* dst = out.data<float>();
  for (int64_t i = 0; i < rows * k; ++i) {
    TITAN_CHECK(index[i] >= 0 && index[i] < columns, "gather_columns: column {} is outside [0, {})", index[i], columns);
    dst[i] = src[(i / k) * columns + index[i]];
  }
}

void scatter_columns_kernel(const Tensor& out, const Tensor& grad, const Tensor& indices) {
  const int64_t columns = out.size(1), k = indices.size(1);
  const float* g = grad.data<float>();
  const int64_t* index = indices.data<int64_t>();
  float* dst = out.data<float>();
  // A column chosen twice in one row (never by top-k) would add both gradients.
  for (int64_t i = 0; i < grad.numel(); ++i) dst[(i / k) * columns + index[i]] += g[i];
}

void normalize_rows_kernel(const Tensor& out, const Tensor& x) {
  const int64_t rows = x.size(0), columns = x.size(1);
  const float* src = x.data<float>();
  float* dst = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t c = 0; c < columns; ++c) sum += src[r * columns + c];
    for (int64_t c = 0; c < columns; ++c) dst[r * columns + c] = sum == 0.0f ? 0.0f : src[r * columns + c] / sum;
  }
}

// y = x / s with s = sum(x): dx_i = (g_i - sum_j g_j y_j) / s.
void normalize_rows_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& x) {
  const int64_t rows = x.size(0), columns = x.size(1);
  const float* src = x.data<float>();
  const float* g = grad_out.data<float>();
  float* dst = grad_x.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0.0f, weighted = 0.0f;
    for (int64_t c = 0; c < columns; ++c) sum += src[r * columns + c];
    if (sum == 0.0f) {
      for (int64_t c = 0; c < columns; ++c) dst[r * columns + c] = 0.0f;
      continue;
    }
    for (int64_t c = 0; c < columns; ++c) weighted += g[r * columns + c] * (src[r * columns + c] / sum);
    for (int64_t c = 0; c < columns; ++c) dst[r * columns + c] = (g[r * columns + c] - weighted) / sum;
  }
}

void sigmoid_kernel(const Tensor& y, const Tensor& x) {
  dispatch_float("sigmoid", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    parallel_for(x.numel(), 4096, [&](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) out[i] = from_f32<T>(sigmoid(to_f32(in[i])));
    });
  });
}

void sigmoid_backward_kernel(const Tensor& grad_x, const Tensor& grad_out, const Tensor& y) {
  dispatch_float("sigmoid_backward", y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad_out.data<T>();
    const T* out = y.data<T>();
    T* dx = grad_x.data<T>();
    parallel_for(y.numel(), 4096, [&](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        const float s = to_f32(out[i]);
        dx[i] = from_f32<T>(to_f32(g[i]) * s * (1.0f - s));
      }
    });
  });
}

}  // namespace

void register_moe_routing() {
  topk_kernels.set_kernel(DeviceType::cpu, topk_kernel);
  limit_to_groups_kernels.set_kernel(DeviceType::cpu, limit_to_groups_kernel);
  expert_order_kernels.set_kernel(DeviceType::cpu, expert_order_kernel);
  permute_tokens_kernels.set_kernel(DeviceType::cpu, permute_tokens_kernel);
  unpermute_sum_kernels.set_kernel(DeviceType::cpu, unpermute_sum_kernel);
  combine_experts_kernels.set_kernel(DeviceType::cpu, combine_experts_kernel);
  combine_experts_backward_kernels.set_kernel(DeviceType::cpu, combine_experts_backward_kernel);
  gather_columns_kernels.set_kernel(DeviceType::cpu, gather_columns_kernel);
  scatter_columns_kernels.set_kernel(DeviceType::cpu, scatter_columns_kernel);
  normalize_rows_kernels.set_kernel(DeviceType::cpu, normalize_rows_kernel);
  normalize_rows_backward_kernels.set_kernel(DeviceType::cpu, normalize_rows_backward_kernel);
  sigmoid_kernels.set_kernel(DeviceType::cpu, sigmoid_kernel);
  sigmoid_backward_kernels.set_kernel(DeviceType::cpu, sigmoid_backward_kernel);
}

}  // namespace titan::ops::cpu::TITAN_ISA
