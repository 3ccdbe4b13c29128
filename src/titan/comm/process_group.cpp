#include "titan/comm/process_group.h"

#include <algorithm>
#include <numeric>

namespace titan::comm {

namespace {

class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool completed() override { return true; }
};

}  // namespace

std::shared_ptr<Work> completed_work() { return std::make_shared<CompletedWork>(); }

std::shared_ptr<ProcessGroup> ProcessGroup::split_axis(int color, int key, int members, const std::string& name) {
  std::shared_ptr<ProcessGroup> group = split(color, key, name);
  TITAN_CHECK(group->size() == members && group->rank() == key,
              "splitting group {} into {}: rank {} of {} ranks, the mesh expected rank {} of {}", this->name(), name,
              group->rank(), group->size(), key, members);
  return group;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
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

void check_reduce_op(const ProcessGroup& group, const char* what, DType dtype, ReduceOp op) {
  TITAN_CHECK(op != ReduceOp::avg || is_floating(dtype),
              "{} on {}: avg of a {} tensor (avg needs a floating-point dtype; reduce with sum and divide)", what,
              group.name(), dtype_name(dtype));
}

int64_t check_all_to_all(const ProcessGroup& group, const Tensor& output, const Tensor& input,
                         const std::vector<int64_t>& output_splits, const std::vector<int64_t>& input_splits) {
  TITAN_CHECK(output.dtype() == input.dtype() && output.is_contiguous() && input.is_contiguous(),
              "all_to_all on {}: needs contiguous tensors of one dtype, got {} and {}", group.name(),
              dtype_name(output.dtype()), dtype_name(input.dtype()));
  TITAN_CHECK(input.dim() >= 1 && output.dim() >= 1 &&
                  Shape(input.shape().begin() + 1, input.shape().end()) ==
                      Shape(output.shape().begin() + 1, output.shape().end()),
              "all_to_all on {}: input {} and output {} must be rows of one shape", group.name(),
              shape_str(input.shape()), shape_str(output.shape()));
  TITAN_CHECK(
      static_cast<int>(output_splits.size()) == group.size() && static_cast<int>(input_splits.size()) == group.size(),
      "all_to_all on {}: needs {} split sizes each way, got {} and {}", group.name(), group.size(),
      output_splits.size(), input_splits.size());
  const auto valid = [](const std::vector<int64_t>& splits, int64_t rows) {
    return std::all_of(splits.begin(), splits.end(), [](int64_t n) { return n >= 0; }) &&
           std::accumulate(splits.begin(), splits.end(), int64_t{0}) == rows;
  };
  TITAN_CHECK(valid(input_splits, input.size(0)) && valid(output_splits, output.size(0)),
              "all_to_all on {}: split sizes {} / {} do not add up to the rows of input {} / output {}", group.name(),
              input_splits, output_splits, shape_str(input.shape()), shape_str(output.shape()));
  return shape_numel(Shape(input.shape().begin() + 1, input.shape().end()));
}

std::vector<std::vector<double>> gather_per_rank(ProcessGroup& group, const std::vector<double>& mine) {
  const int64_t count = static_cast<int64_t>(mine.size());
  const Tensor all = Tensor::empty({group.size(), count});
  group.all_gather(all, Tensor::from_floats(std::vector<float>(mine.begin(), mine.end()), {count}))->wait();
  const std::vector<float> values = all.to_floats();
  std::vector<std::vector<double>> result(mine.size(), std::vector<double>(static_cast<size_t>(group.size())));
  for (size_t rank = 0; rank < result.front().size(); ++rank) {
    for (size_t i = 0; i < mine.size(); ++i) result[i][rank] = values[rank * mine.size() + i];
  }
  return result;
}

double all_reduce_scalar(ProcessGroup& group, double value, ReduceOp op) {
  if (group.size() == 1) return value;
  Tensor total = Tensor::full({1}, value, DType::f32);
  group.all_reduce(total, op)->wait();
  return total.item();
}

}  // namespace titan::comm
