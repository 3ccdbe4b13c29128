#include "titan/distributed/process_group.h"

namespace titan::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

void check_all_gather(const ProcessGroup& group, const Tensor& output, const Tensor& input) {
  TITAN_CHECK(output.dtype() == input.dtype() && output.numel() == input.numel() * group.size() &&
                  output.is_contiguous() && input.is_contiguous(),
              "all_gather on {}: output {} {} must hold {} contiguous copies of input {} {}", group.name(),
              shape_str(output.shape()), dtype_name(output.dtype()), group.size(), shape_str(input.shape()),
              dtype_name(input.dtype()));
}

void check_reduce_scatter(const ProcessGroup& group, const Tensor& output, const Tensor& input) {
  TITAN_CHECK(output.dtype() == input.dtype() && input.numel() == output.numel() * group.size() &&
                  output.is_contiguous() && input.is_contiguous(),
              "reduce_scatter on {}: input {} {} must hold {} contiguous blocks of output {} {}", group.name(),
              shape_str(input.shape()), dtype_name(input.dtype()), group.size(), shape_str(output.shape()),
              dtype_name(output.dtype()));
}

}  // namespace titan::distributed
