#include "titan/ops/grouped_gemm.h"

#include "titan/core/trace_context.h"

#include "titan/core/profiler.h"

#include "titan/ops/checks.h"

namespace titan::ops {
namespace {

void check_operands(const char* op, const Tensor& rows, const Tensor& w, const Tensor& counts) {
  check_defined(op, rows, "rows");
  check_defined(op, w, "w");
  check_rank(op, rows, 2, "rows");
  check_rank(op, w, 3, "w");
  check_dtype(op, rows, {DType::f32, DType::bf16}, "rows");
  check_same_dtype(op, rows, w);
  check_same_device(op, rows, w);
  check_dtype(op, counts, {DType::i64}, "counts");
  TITAN_CHECK(counts.dim() == 1 && counts.size(0) == w.size(0), "{}: counts {} do not match {} experts", op,
              shape_str(counts.shape()), w.size(0));
}

}  // namespace

Tensor grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& counts) {
  const trace::OpScope op_scope("grouped_gemm");
  check_operands("grouped_gemm", x, w, counts);
  TITAN_CHECK(x.size(1) == w.size(2), "grouped_gemm: rows {} do not match expert weights {} ([E, out, in])",
              shape_str(x.shape()), shape_str(w.shape()));
  Tensor y = Tensor::empty({x.size(0), w.size(1)}, x.dtype(), x.device());
  if (has_work(y)) {
    profiler::note_flops(2.0 * static_cast<double>(y.numel()) * static_cast<double>(x.size(1)));
    grouped_gemm_kernels(x.device(), GroupedGemmKind::forward, y, x.contiguous(), w.contiguous(), counts.contiguous());
  }
  return y;
}

Tensor grouped_gemm_input_grad(const Tensor& grad_y, const Tensor& w, const Tensor& counts) {
  const trace::OpScope op_scope("grouped_gemm_input_grad");
  check_operands("grouped_gemm_input_grad", grad_y, w, counts);
  TITAN_CHECK(grad_y.size(1) == w.size(1), "grouped_gemm_input_grad: grad {} does not match expert weights {}",
              shape_str(grad_y.shape()), shape_str(w.shape()));
  Tensor grad_x = Tensor::empty({grad_y.size(0), w.size(2)}, grad_y.dtype(), grad_y.device());
  if (has_work(grad_x)) {
    profiler::note_flops(2.0 * static_cast<double>(grad_x.numel()) * static_cast<double>(grad_y.size(1)));
    grouped_gemm_kernels(grad_y.device(), GroupedGemmKind::input_grad, grad_x, grad_y.contiguous(), w.contiguous(),
                         counts.contiguous());
  }
  return grad_x;
}

Tensor grouped_gemm_weight_grad(const Tensor& grad_y, const Tensor& x, const Tensor& counts) {
  const trace::OpScope op_scope("grouped_gemm_weight_grad");
  check_defined("grouped_gemm_weight_grad", grad_y, "grad_y");
  check_defined("grouped_gemm_weight_grad", x, "x");
  check_rank("grouped_gemm_weight_grad", grad_y, 2, "grad_y");
  check_rank("grouped_gemm_weight_grad", x, 2, "x");
  check_same_dtype("grouped_gemm_weight_grad", grad_y, x);
  check_dtype("grouped_gemm_weight_grad", counts, {DType::i64}, "counts");
  TITAN_CHECK(grad_y.size(0) == x.size(0), "grouped_gemm_weight_grad: {} gradient rows for {} input rows",
              grad_y.size(0), x.size(0));
  Tensor grad_w = Tensor::empty({counts.size(0), grad_y.size(1), x.size(1)}, grad_y.dtype(), grad_y.device());
  if (has_work(grad_w)) {
    profiler::note_flops(2.0 * static_cast<double>(grad_y.numel()) * static_cast<double>(x.size(1)));
    grouped_gemm_kernels(grad_y.device(), GroupedGemmKind::weight_grad, grad_w, grad_y.contiguous(), x.contiguous(),
                         counts.contiguous());
  }
  return grad_w;
}

}  // namespace titan::ops
