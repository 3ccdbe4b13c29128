#include "titan/parallel/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "titan/autograd/function_node.h"
#include "titan/autograd/saved_ops.h"
#include "titan/core/copy.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/embedding.h"
#include "titan/ops/grad_clip.h"

namespace titan::parallel {
namespace {

// [tp * B * s * R] rank-major (what all_gather produces) <-> [B, tp * s, R...]
// (the sequence concatenated), both as contiguous copies.
Tensor rank_major_to_sequence(const Tensor& flat, int64_t ranks, const Shape& part_shape) {
  const int64_t batch = part_shape[0], seq = part_shape[1];
  const int64_t rest = shape_numel(part_shape) / std::max<int64_t>(batch * seq, 1);
  Shape full = part_shape;
  full[1] = seq * ranks;
  return flat.view({ranks, batch, seq, rest}).permute({1, 0, 2, 3}).contiguous().view(full);
}

Tensor sequence_to_rank_major(const Tensor& full, int64_t ranks) {
  const int64_t batch = full.size(0), seq = full.size(1) / ranks;
  const int64_t rest = full.numel() / std::max<int64_t>(batch * full.size(1), 1);
  return full.contiguous().view({batch, ranks, seq, rest}).permute({1, 0, 2, 3}).contiguous().view({-1});
}

Tensor gather_sequence_data(const Tensor& x, comm::ProcessGroup& group) {
  const Tensor part = x.contiguous();
  Tensor gathered = Tensor::empty({group.size() * part.numel()}, part.dtype(), part.device());
  group.all_gather(gathered, part.view({-1}))->wait();
  return rank_major_to_sequence(gathered, group.size(), part.shape());
}

Tensor reduce_scatter_sequence_data(const Tensor& x, comm::ProcessGroup& group) {
  TITAN_CHECK(x.dim() >= 2 && x.size(1) % group.size() == 0,
              "sequence parallelism: sequence of {} ({}) does not split over {} ranks", x.dim() >= 2 ? x.size(1) : 0,
              shape_str(x.shape()), group.size());
  Shape part = x.shape();
  part[1] /= group.size();
  Tensor out = Tensor::empty(part, x.dtype(), x.device());
  group.reduce_scatter(out.view({-1}), sequence_to_rank_major(x, group.size()), comm::ReduceOp::sum)->wait();
  return out;
}

// Ids relative to the rows [first, first + rows) of a split table (0 where
// outside them) and a [ids..., dim] mask in `dtype` on `device`: 1 where the
// id is inside, 0 elsewhere. Ids are few (batch x sequence): built on the host.
struct LocalIds {
  Tensor ids, mask;
};
LocalIds ids_in_rows(const Tensor& ids, int64_t first, int64_t rows, int64_t dim, DType dtype, Device device) {
  const Tensor host = ids.to(Device::cpu()).contiguous();
  Tensor local = Tensor::empty(host.shape(), DType::i64);
  Shape mask_shape = host.shape();
  mask_shape.push_back(dim);
  Tensor mask = Tensor::empty(mask_shape);
  int64_t* out = local.data<int64_t>();
  float* inside = mask.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    const int64_t id = host.dtype() == DType::i64 ? host.data<int64_t>()[i] : host.data<int32_t>()[i];
    const bool held = id >= first && id < first + rows;
    out[i] = held ? id - first : 0;
    std::fill_n(inside + i * dim, dim, held ? 1.0f : 0.0f);
  }
  return {local.to(device), cast(mask, dtype).to(device)};
}

}  // namespace

Tensor gather_sequence(const Tensor& x, const std::shared_ptr<comm::ProcessGroup>& group) {
  if (group->size() == 1) return x;
  Tensor y = gather_sequence_data(x, *group);
  autograd::record("GatherSequenceBackward", {&x}, {&y}, [group](const auto& grads) {
    return std::vector<Tensor>{reduce_scatter_sequence_data(grads[0], *group)};
  });
  return y;
}

Tensor reduce_scatter_sequence(const Tensor& x, const std::shared_ptr<comm::ProcessGroup>& group) {
  if (group->size() == 1) return x;
  // Per-op selective checkpointing may hand back this output from the forward: no second collective.
  Tensor y = autograd::run_saved_op(autograd::SavedOpKind::reduce_scatter, {},
                                    [&] { return std::vector<Tensor>{reduce_scatter_sequence_data(x, *group)}; })[0];
  autograd::record("ReduceScatterSequenceBackward", {&x}, {&y},
                   [group](const auto& grads) { return std::vector<Tensor>{gather_sequence_data(grads[0], *group)}; });
  return y;
}

Tensor sum_partial_outputs(const Tensor& x, comm::ProcessGroup& group) {
  TITAN_CHECK(!x.requires_grad(),
              "tensor parallelism without sequence parallelism is for inference: a partial output that needs a "
              "gradient cannot be summed here");
  Tensor sum = x.contiguous().clone();
  group.all_reduce(sum, comm::ReduceOp::sum)->wait();
  return sum;
}

void shard_parameter(const std::string& name, nn::Parameter& parameter, int64_t dim, const comm::ProcessGroup& group) {
  const Tensor full = parameter.data;
  dim = full.wrap_dim(dim);
  TITAN_CHECK(full.size(dim) % group.size() == 0,
              "tensor parallelism: {} has {} along dim {}, not divisible by tensor_parallel_degree {}", name,
              full.size(dim), dim, group.size());
  keep_rank_part(parameter, dim, group);
  parameter.tensor_parallel_dim = dim;
}

void keep_rank_part(nn::Parameter& parameter, int64_t dim, const comm::ProcessGroup& group) {
  const Tensor full = parameter.data;
  dim = full.wrap_dim(dim);
  const int64_t part = full.size(dim) / group.size();
  Tensor local = full.narrow(dim, group.rank() * part, part).contiguous().clone();
  local.set_requires_grad(full.requires_grad());  // a frozen parameter (LoRA's base) stays frozen
  parameter.data = local;
  parameter.layout = {full.shape(), Shape(static_cast<size_t>(full.dim()), 0)};
  parameter.layout.offsets[static_cast<size_t>(dim)] = group.rank() * part;
}

Tensor gather_parameter(const Tensor& local, int64_t dim, comm::ProcessGroup& group) {
  const Tensor part = local.contiguous();
  Tensor gathered = Tensor::empty({group.size() * part.numel()}, part.dtype(), part.device());
  group.all_gather(gathered, part.view({-1}))->wait();
  // Rank-major [tp, ...local] -> concatenated along dim.
  Shape stacked{group.size()};
  stacked.insert(stacked.end(), part.shape().begin(), part.shape().end());
  std::vector<int64_t> order;
  for (int64_t d = 0; d < part.dim(); ++d) {
    if (d == dim) order.push_back(0);
    order.push_back(d + 1);
  }
  Shape full = part.shape();
  full[static_cast<size_t>(dim)] *= group.size();
  return gathered.view(stacked).permute(order).contiguous().view(full);
}

Tensor vocab_parallel_embedding(const Tensor& weight, const Tensor& ids,
                                const std::shared_ptr<comm::ProcessGroup>& group) {
  TITAN_CHECK(ids.dim() == 2 && ids.size(1) % group->size() == 0,
              "sequence parallelism: training.seq_len {} must be a multiple of tensor_parallel_degree {}",
              ids.dim() == 2 ? ids.size(1) : 0, group->size());
  const int64_t rows = weight.size(0);
  const DType dtype = weight.dtype();
  const LocalIds local = ids_in_rows(ids, group->rank() * rows, rows, weight.size(1), dtype, weight.device());
  Tensor y = reduce_scatter_sequence_data(ops::mul(ops::embedding(weight, local.ids), local.mask), *group);
  autograd::record("VocabParallelEmbeddingBackward", {&weight}, {&y}, [=](const auto& g) {
    const Tensor whole = gather_sequence_data(g[0], *group);
    const Tensor mask = whole.dtype() == local.mask.dtype() ? local.mask : cast(local.mask, whole.dtype());
    return std::vector<Tensor>{ops::embedding_backward(ops::mul(whole, mask), local.ids, rows, dtype)};
  });
  return y;
}

Tensor vocab_parallel_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets,
                                    int64_t vocab_size, ops::FusedCrossEntropyOptions options,
                                    const std::shared_ptr<comm::ProcessGroup>& group) {
  TITAN_CHECK(weight.size(0) * group->size() == vocab_size,
              "vocab-parallel loss: {} rows per rank x {} ranks != vocabulary {}", weight.size(0), group->size(),
              vocab_size);
  options.vocab_offset = group->rank() * weight.size(0);
  options.vocab_size = vocab_size;
  options.compute_grads = autograd::grad_enabled() && (hidden.requires_grad() || weight.requires_grad());
  // lse over the whole vocabulary from every shard's: M = max over shards, then M + log(sum exp(lse_r - M)).
  options.combine = [group](float* lse, float* target_logit, int64_t rows) {
    Tensor stats = Tensor::empty({3, rows});
    float* data = stats.data<float>();
    std::copy(lse, lse + rows, data);
    Tensor maxima = stats.narrow(0, 0, 1).view({rows});
    group->all_reduce(maxima, comm::ReduceOp::max)->wait();
    for (int64_t r = 0; r < rows; ++r) {
      const float m = data[r];
      data[rows + r] = std::isinf(m) ? 0.0f : std::exp(lse[r] - m);
      data[2 * rows + r] = target_logit[r];
    }
    Tensor sums = stats.narrow(0, 1, 2).contiguous();
    group->all_reduce(sums, comm::ReduceOp::sum)->wait();
    const float* summed = sums.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      lse[r] = data[r] + std::log(summed[r]);
      target_logit[r] = summed[rows + r];
    }
  };
  ops::FusedCrossEntropyOutput out = ops::fused_linear_cross_entropy(hidden, weight, targets, options);
  const Tensor grad_hidden = out.grad_hidden, grad_weight = out.grad_weight;
  autograd::record("VocabParallelCrossEntropyBackward", {&hidden, &weight}, {&out.loss}, [=](const auto& g) {
    const Tensor factor = titan::cast(g[0], DType::f32).reshape({1});
    return std::vector<Tensor>{ops::scaled_by(grad_hidden, factor, 0), ops::scaled_by(grad_weight, factor, 0)};
  });
  return out.loss;
}

}  // namespace titan::parallel
