#include "titan/parallel/parallelized_model.h"

#include "titan/core/copy.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/grad_clip.h"
#include "titan/parallel/grad_norm.h"
#include "titan/parallel/tensor_parallel.h"

namespace titan::parallel {

using comm::MeshDim;

void ParallelizedModel::finish_backward(bool last_of_step) {
  if (!fsdp) return;
  fsdp->set_sync_replicas(last_of_step);
  fsdp->finish_backward();
}

Tensor ParallelizedModel::synchronize_and_clip_gradients(nn::Module& model, double max_norm, Device device) const {
  std::vector<Tensor> split, replicated;
  for (auto& [name, parameter] : model.named_parameters()) {
    const Tensor grad = parameter->data.grad();
    if (!grad.defined()) continue;
    (parameter->tensor_parallel_dim >= 0 ? split : replicated).push_back(grad);
  }
  const auto& tp = mesh_->group(MeshDim::tp);
  if (tp->size() > 1 && !replicated.empty()) {
    // One all-reduce of every replicated gradient, through a bucket.
    int64_t total = 0;
    for (const Tensor& grad : replicated) total += grad.numel();
    Tensor bucket = Tensor::empty({total}, DType::f32, device);
    int64_t offset = 0;
    for (const Tensor& grad : replicated) {
      titan::copy_(bucket.narrow(0, offset, grad.numel()).view(grad.shape()), grad);
      offset += grad.numel();
    }
    tp->all_reduce(bucket, comm::ReduceOp::sum)->wait();
    offset = 0;
    for (const Tensor& grad : replicated) {
      titan::copy_(grad, bucket.narrow(0, offset, grad.numel()).view(grad.shape()));
      offset += grad.numel();
    }
  }
  // FSDP shards are disjoint over dp_shard_cp, pipeline stages over pp,
  // tensor-parallel parts over tp; replicated parameters count once.
  std::vector<comm::ProcessGroup*> dp_groups, split_groups;
  if (fsdp) dp_groups.push_back(mesh_->group(MeshDim::dp_shard_cp).get());
  if (pipelined_) dp_groups.push_back(mesh_->group(MeshDim::pp).get());
  split_groups = dp_groups;
  split_groups.push_back(tp.get());
  const Tensor sum_squares =
      ops::add(grad_sum_squares(split, split_groups, device), grad_sum_squares(replicated, dp_groups, device));
  // Clipping multiplies by the factor on the device (by 1 when under the limit: exact).
  Tensor clip = ops::clip_scalars(sum_squares, max_norm);
  ops::scale_all_by_(split, clip, 1);
  ops::scale_all_by_(replicated, clip, 1);
  return clip;
}

void ParallelizedModel::for_each_full_parameter(nn::Module& model,
                                                const std::function<void(nn::Parameter*, const Tensor&)>& use) {
  // After FSDP's shards, the tensor-parallel parts and the expert-parallel experts.
  const bool split_tp = mesh_->size(MeshDim::tp) > 1, split_ep = mesh_->size(MeshDim::ep) > 1;
  auto whole = [&](nn::Parameter* parameter, Tensor tensor) {
    if (split_tp && parameter->tensor_parallel_dim >= 0) {
      tensor = gather_parameter(tensor, parameter->tensor_parallel_dim, *mesh_->group(MeshDim::tp));
    }
    if (split_ep && parameter->expert_parallel) tensor = gather_parameter(tensor, 0, *mesh_->group(MeshDim::ep));
    use(parameter, tensor);
  };
  if (fsdp) {
    fsdp->for_each_full_parameter(whole);
  } else {
    for (auto& [name, parameter] : model.named_parameters()) whole(parameter, parameter->data);
  }
}

}  // namespace titan::parallel
