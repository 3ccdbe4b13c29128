// CPU GEMM through oneDNN's matmul primitive. Primitives are created once per
// (shapes, strides, dtypes, alpha, beta) and cached: training repeats the same
// few dozen shapes every step, and creating a primitive costs far more than a
// small multiply. Transposed operands are passed as strides, never copied.
//
// Debian's oneDNN 2.6 has a bf16 matmul only on AVX-512 CPUs. Elsewhere bf16
// operands are widened to f32 and multiplied by the f32 primitive: widening is
// exact (every bf16 is an f32) and oneDNN's bf16 matmul also accumulates the
// same products in f32, so results differ only in summation order. The larger
// operand is widened a panel at a time, so it never needs a whole f32 copy.
#include <dnnl.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "titan/core/copy.h"
#include "titan/ops/checks.h"
#include "titan/ops/cpu/onednn/gemm.h"
#include "titan/ops/float8.h"
#include "titan/ops/gemm.h"

namespace titan::ops::cpu {
namespace {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::data_type to_dnnl(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return dnnl::memory::data_type::f32;
    case DType::bf16:
      return dnnl::memory::data_type::bf16;
    default:
      unsupported_dtype("gemm", Device::cpu(), dtype);
  }
}

// Dims and strides of a 2-d or 3-d operand as 3-d (a missing batch is 1).
struct Layout3 {
  dnnl::memory::dims dims;
  dnnl::memory::dims strides;
};

Layout3 layout3(const Tensor& t) {
  if (t.dim() == 2) return {{1, t.size(0), t.size(1)}, {t.size(0) * t.size(1), t.stride(0), t.stride(1)}};
  return {{t.size(0), t.size(1), t.size(2)}, {t.stride(0), t.stride(1), t.stride(2)}};
}

struct CachedMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c;
};

std::string cache_key(const Layout3& a, const Layout3& b, const Layout3& c, DType ab, DType cd, float alpha, float beta,
                      const std::vector<int64_t>& multipliers) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{:a}|{:a}|{}", fmt::join(a.dims, ","), fmt::join(a.strides, ","),
                     fmt::join(b.dims, ","), fmt::join(b.strides, ","), fmt::join(c.dims, ","),
                     fmt::join(c.strides, ","), static_cast<int>(ab), static_cast<int>(cd), alpha, beta,
                     fmt::join(multipliers, ","));
}

// `multipliers`: the widths (1, or C's columns) of f32 factors the
// accumulators are multiplied by, one binary post-op each, in order, before
// the one rounding to C's dtype. Passed at execution, so one primitive
// serves every step's values (an alpha would need a primitive per value).
std::shared_ptr<CachedMatmul> get_matmul(const Layout3& a, const Layout3& b, const Layout3& c, DType ab, DType cd,
                                         float alpha, float beta, const std::vector<int64_t>& multipliers = {}) {
  static std::mutex mutex;
  static std::unordered_map<std::string, std::shared_ptr<CachedMatmul>> cache;
  const std::string key = cache_key(a, b, c, ab, cd, alpha, beta, multipliers);
  std::lock_guard<std::mutex> lock(mutex);
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;

  auto entry = std::make_shared<CachedMatmul>();
  entry->a = dnnl::memory::desc(a.dims, to_dnnl(ab), a.strides);
  entry->b = dnnl::memory::desc(b.dims, to_dnnl(ab), b.strides);
  entry->c = dnnl::memory::desc(c.dims, to_dnnl(cd), c.strides);
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  dnnl::post_ops post_ops;
  if (beta != 0.0f) post_ops.append_sum(beta);
  for (const int64_t width : multipliers) {
    post_ops.append_binary(dnnl::algorithm::binary_mul,
                           dnnl::memory::desc({1, 1, width}, dnnl::memory::data_type::f32, {width, width, 1}));
  }
  attr.set_post_ops(post_ops);
  dnnl::matmul::desc desc(entry->a, entry->b, entry->c);
  dnnl::matmul::primitive_desc primitive_desc(desc, attr, cpu_engine());
  entry->primitive = dnnl::matmul(primitive_desc);
  if (cache.size() > 4096) cache.clear();  // a runaway shape stream must not grow without bound
  cache.emplace(key, entry);
  return entry;
}

void gemm_kernel(const Tensor& a, const Tensor& b, const Tensor& c, float alpha, float beta);

// C = alpha A B + beta C with bf16 A and B: the smaller operand is widened
// whole, the larger streamed through f32 panels of rows of A (or columns of
// B) holding at most kGemmWidenPanelElements, but never fewer than 64 lines, so
// that each oneDNN call stays a GEMM worth packing its other operand for.
void gemm_widened(const Tensor& a, const Tensor& b, const Tensor& c, float alpha, float beta) {
  const bool stream_a = a.numel() >= b.numel();
  const Tensor whole = (stream_a ? b : a).to(DType::f32);
  const int64_t extent = stream_a ? c.size(-2) : c.size(-1);
  const int64_t per_line = (stream_a ? a.numel() : b.numel()) / extent;
  const int64_t lines = std::min(extent, std::max<int64_t>(64, kGemmWidenPanelElements / per_line));
  for (int64_t start = 0; start < extent; start += lines) {
    const int64_t length = std::min(lines, extent - start);
    if (stream_a) {
      gemm_kernel(a.narrow(a.dim() - 2, start, length).to(DType::f32), whole, c.narrow(c.dim() - 2, start, length),
                  alpha, beta);
    } else {
      gemm_kernel(whole, b.narrow(b.dim() - 1, start, length).to(DType::f32), c.narrow(c.dim() - 1, start, length),
                  alpha, beta);
    }
  }
}

void gemm_kernel(const Tensor& a, const Tensor& b, const Tensor& c, float alpha, float beta) {
  if (a.dtype() == DType::bf16 && gemm_widens_bf16()) {
    gemm_widened(a, b, c, alpha, beta);
    return;
  }
  if (a.dtype() == DType::f32 && c.dtype() == DType::bf16) {
    // oneDNN has no f32 x f32 -> bf16 matmul: accumulate in f32, round once.
    Tensor staged = beta != 0.0f ? c.to(DType::f32).contiguous() : Tensor::empty(c.shape(), DType::f32);
    gemm_kernel(a, b, staged, alpha, beta);
    copy_(c, staged);
    return;
  }
  const Layout3 la = layout3(a), lb = layout3(b), lc = layout3(c);
  std::shared_ptr<CachedMatmul> matmul;
  try {
    matmul = get_matmul(la, lb, lc, a.dtype(), c.dtype(), alpha, beta);
  } catch (const dnnl::error& error) {
    fail("gemm: oneDNN has no matmul for A {} strides {} ({}), B {} strides {}, C {} ({}): {}", shape_str(a.shape()),
         shape_str(a.strides()), dtype_name(a.dtype()), shape_str(b.shape()), shape_str(b.strides()),
         shape_str(c.shape()), dtype_name(c.dtype()), error.what());
  }
  dnnl::stream stream(cpu_engine());
  dnnl::memory a_mem(matmul->a, cpu_engine(), a.data_ptr());
  dnnl::memory b_mem(matmul->b, cpu_engine(), b.data_ptr());
  dnnl::memory c_mem(matmul->c, cpu_engine(), c.data_ptr());
  matmul->primitive.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  stream.wait();
}

// The float8 GEMM's scales as post-ops (ops/float8.h): out = (a @ b) * (1 / a_scale) * (1 / b_scale).
void float8_scaled_gemm_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& a_scale,
                               const Tensor& b_scale) {
  std::vector<std::vector<float>> factors;
  std::vector<int64_t> widths;
  factors.reserve(2);
  widths.reserve(2);
  for (const Tensor& scale : {a_scale, b_scale}) {
    if (!scale.defined()) continue;
    const float* s = scale.data<float>();
    std::vector<float>& inverse = factors.emplace_back(static_cast<size_t>(scale.numel()));
    for (size_t i = 0; i < inverse.size(); ++i) inverse[i] = 1.0f / s[i];
    widths.push_back(scale.numel());
  }
  const Layout3 la = layout3(a), lb = layout3(b), lc = layout3(out);
  std::shared_ptr<CachedMatmul> matmul;
  try {
    matmul = get_matmul(la, lb, lc, a.dtype(), out.dtype(), 1.0f, 0.0f, widths);
  } catch (const dnnl::error& error) {
    fail("float8_scaled_mm: oneDNN has no matmul for A {} strides {}, B {} strides {}, C {} ({}) with {} scale(s): {}",
         shape_str(a.shape()), shape_str(a.strides()), shape_str(b.shape()), shape_str(b.strides()),
         shape_str(out.shape()), dtype_name(out.dtype()), widths.size(), error.what());
  }
  dnnl::stream stream(cpu_engine());
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(matmul->a, cpu_engine(), a.data_ptr())},
                                             {DNNL_ARG_WEIGHTS, dnnl::memory(matmul->b, cpu_engine(), b.data_ptr())},
                                             {DNNL_ARG_DST, dnnl::memory(matmul->c, cpu_engine(), out.data_ptr())}};
  for (size_t i = 0; i < factors.size(); ++i) {
    const dnnl::memory::desc desc({1, 1, widths[i]}, dnnl::memory::data_type::f32, {widths[i], widths[i], 1});
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1,
                 dnnl::memory(desc, cpu_engine(), factors[i].data()));
  }
  matmul->primitive.execute(stream, args);
  stream.wait();
}

}  // namespace

bool gemm_widens_bf16() {
  static const bool widens = [] {
    const Layout3 square{{1, 16, 16}, {256, 16, 1}};
    try {
      get_matmul(square, square, square, DType::bf16, DType::f32, 1.0f, 0.0f);
      return false;
    } catch (const dnnl::error&) {
      return true;
    }
  }();
  return widens;
}

void register_gemm() {
  gemm_kernels.set_kernel(DeviceType::cpu, gemm_kernel);
  // Where bf16 is widened (no AVX-512), float8_scaled_mm keeps its f32 GEMM and unscaling pass.
  if (!gemm_widens_bf16()) float8_scaled_gemm_kernels.set_kernel(DeviceType::cpu, float8_scaled_gemm_kernel);
}

}  // namespace titan::ops::cpu
