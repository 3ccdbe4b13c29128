#include "titan/ops/gemm.h"

#include "titan/core/trace_context.h"

#include "titan/core/profiler.h"

#include "titan/core/copy.h"
#include "titan/ops/checks.h"
#include "titan/ops/elementwise.h"

namespace titan::ops {
namespace {

// A matrix operand needs a unit stride in one of its two inner dims (row- or
// column-major); anything else is copied to row-major first.
Tensor matrix_layout(const Tensor& t) {
  const int64_t rank = t.dim();
  const bool row_major = t.stride(rank - 1) == 1 || t.size(rank - 1) == 1;
  const bool column_major = t.stride(rank - 2) == 1 || t.size(rank - 2) == 1;
  return row_major || column_major ? t : t.contiguous();
}

int64_t batch_of(const Tensor& t) { return t.dim() == 3 ? t.size(0) : 1; }

}  // namespace

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, float alpha, float beta) {
  // Operands copied to a layout the kernel takes are the GEMM's allocations.
  const trace::OpScope op_scope("gemm");
  check_defined("gemm", a, "A");
  check_defined("gemm", b, "B");
  check_defined("gemm", c, "C");
  for (const Tensor* t : {&a, &b, &c}) {
    TITAN_CHECK(t->dim() == 2 || t->dim() == 3, "gemm: operands must be 2-d or 3-d, got A {} B {} C {}",
                shape_str(a.shape()), shape_str(b.shape()), shape_str(c.shape()));
  }
  check_same_device("gemm", a, b);
  check_same_device("gemm", a, c);
  check_same_dtype("gemm", a, b);
  check_dtype("gemm", a, {DType::f32, DType::bf16}, "A");
  check_dtype("gemm", c, {DType::f32, DType::bf16}, "C");
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  TITAN_CHECK(b.size(-2) == k && c.size(-2) == m && c.size(-1) == n, "gemm: shapes do not chain: A {} @ B {} -> C {}",
              shape_str(a.shape()), shape_str(b.shape()), shape_str(c.shape()));
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1;
  TITAN_CHECK((batch_of(a) == batch || batch_of(a) == 1) && (batch_of(b) == batch || batch_of(b) == 1) &&
                  (c.dim() == 3 || (a.dim() == 2 && b.dim() == 2)),
              "gemm: batch sizes do not broadcast: A {} B {} C {}", shape_str(a.shape()), shape_str(b.shape()),
              shape_str(c.shape()));
  if (m == 0 || n == 0 || batch == 0 || c.device().is_meta()) return;
  if (k == 0) {
    if (beta == 0.0f) {
      fill_(c, 0.0);
    } else {
      scale_(c, beta);
    }
    return;
  }
  TITAN_CHECK(c.stride(-1) == 1, "gemm: C must be row-major in its last dim (strides {})", shape_str(c.strides()));
  profiler::note_flops(2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
                       static_cast<double>(k));
  gemm_kernels(c.device(), matrix_layout(a), matrix_layout(b), c, alpha, beta);
}

Tensor matmul(const Tensor& a, const Tensor& b, std::optional<DType> out_dtype) {
  const trace::OpScope op_scope("matmul");
  check_defined("matmul", a, "A");
  check_defined("matmul", b, "B");
  TITAN_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: operands must be at least 2-d, got {} and {}",
              shape_str(a.shape()), shape_str(b.shape()));
  Shape out_shape;
  if (a.dim() == 3 || b.dim() == 3) out_shape.push_back(a.dim() == 3 ? a.size(0) : b.size(0));
  out_shape.push_back(a.size(-2));
  out_shape.push_back(b.size(-1));
  Tensor c = Tensor::empty(out_shape, out_dtype.value_or(a.dtype()), a.device());
  gemm(a, b, c);
  return c;
}

}  // namespace titan::ops
