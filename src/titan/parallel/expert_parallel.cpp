#include "titan/parallel/expert_parallel.h"

#include <numeric>

#include "titan/autograd/function_node.h"
#include "titan/nn/functional.h"
#include "titan/parallel/tensor_parallel.h"

namespace titan::parallel {
namespace {

Tensor exchange_rows(const Tensor& rows, const std::vector<int64_t>& output_splits,
                     const std::vector<int64_t>& input_splits, comm::ProcessGroup& group) {
  Shape shape = rows.shape();
  shape[0] = std::accumulate(output_splits.begin(), output_splits.end(), int64_t{0});
  Tensor out = Tensor::empty(shape, rows.dtype(), rows.device());
  group.all_to_all(out, rows.contiguous(), output_splits, input_splits)->wait();
  return out;
}

// Where each received row goes in expert order: rows arrive grouped by source
// rank, then by expert within it (received_counts[p][j]: from rank p for local
// expert j); the local experts want them grouped by expert, then by source.
// Returns order (expert-ordered position -> received position) and its inverse.
std::pair<Tensor, Tensor> source_to_expert_order(const std::vector<int64_t>& received_counts, int64_t ranks,
                                                 int64_t local_experts) {
  std::vector<int64_t> start(static_cast<size_t>(ranks * local_experts));
  int64_t offset = 0;
  for (size_t i = 0; i < start.size(); ++i) {
    start[i] = offset;
    offset += received_counts[i];
  }
  std::vector<int64_t> order, inverse(static_cast<size_t>(offset));
  order.reserve(static_cast<size_t>(offset));
  for (int64_t j = 0; j < local_experts; ++j) {
    for (int64_t p = 0; p < ranks; ++p) {
      const size_t chunk = static_cast<size_t>(p * local_experts + j);
      for (int64_t r = 0; r < received_counts[chunk]; ++r) {
        inverse[static_cast<size_t>(start[chunk] + r)] = static_cast<int64_t>(order.size());
        order.push_back(start[chunk] + r);
      }
    }
  }
  return {Tensor::from_vector(order, {offset}), Tensor::from_vector(inverse, {offset})};
}

}  // namespace

Tensor all_to_all_rows(const Tensor& rows, const std::vector<int64_t>& output_splits,
                       const std::vector<int64_t>& input_splits, const std::shared_ptr<comm::ProcessGroup>& group) {
  Tensor out = exchange_rows(rows, output_splits, input_splits, *group);
  autograd::record("AllToAllRowsBackward", {&rows}, {&out}, [=](const auto& grads) {
    return std::vector<Tensor>{exchange_rows(grads[0], input_splits, output_splits, *group)};
  });
  return out;
}

void apply_expert_parallel(const std::string& where, nn::MoE& moe, const std::shared_ptr<comm::ProcessGroup>& ep) {
  const int64_t experts = moe.config.num_experts, ranks = ep->size();
  TITAN_CHECK(experts % ranks == 0,
              "parallelism.expert_parallel_degree {}: {} has {} experts, which do not split evenly over {} ranks",
              ranks, where, experts, ranks);
  const int64_t local = experts / ranks;
  for (nn::Parameter* parameter :
       {moe.experts->w1, moe.experts->w2, moe.experts->w3, moe.experts->b1, moe.experts->b2, moe.experts->b3}) {
    if (parameter == nullptr) continue;  // the expert biases, where the experts have none
    keep_rank_part(*parameter, 0, *ep);
    parameter->expert_parallel = true;
  }
  moe.experts->set_dispatcher(
      [ep, local, ranks](const Tensor& rows, const Tensor& counts, const nn::ExpertsFunction& compute) {
        // The split sizes are data: the exchange reads them on the host.
        AllowHostReadsScope host_reads;
        // Every rank learns how many rows each peer sends to each of its experts.
        Tensor received = Tensor::empty({ranks * local}, DType::i64, counts.device());
        const std::vector<int64_t> per_rank(static_cast<size_t>(ranks), local);
        ep->all_to_all(received, counts.contiguous(), per_rank, per_rank)->wait();
        const std::vector<int64_t> sent_counts = counts.to_ints(), received_counts = received.to_ints();
        std::vector<int64_t> input_splits(static_cast<size_t>(ranks)), output_splits(static_cast<size_t>(ranks));
        std::vector<int64_t> local_counts(static_cast<size_t>(local));
        for (int64_t p = 0; p < ranks; ++p) {
          for (int64_t j = 0; j < local; ++j) {
            const size_t i = static_cast<size_t>(p * local + j);
            input_splits[static_cast<size_t>(p)] += sent_counts[i];
            output_splits[static_cast<size_t>(p)] += received_counts[i];
            local_counts[static_cast<size_t>(j)] += received_counts[i];
          }
        }
        const Tensor arrived = all_to_all_rows(rows, output_splits, input_splits, ep);
        const auto [order, inverse] = source_to_expert_order(received_counts, ranks, local);
        const Device device = rows.device();
        const Tensor to_device_order = order.to(device), to_device_inverse = inverse.to(device);
        const Tensor expert_rows = F::permute_tokens(arrived, to_device_order, to_device_inverse, 1);
        const Tensor computed = compute(expert_rows, Tensor::from_vector(local_counts, {local}).to(device));
        const Tensor by_source = F::permute_tokens(computed, to_device_inverse, to_device_order, 1);
        return all_to_all_rows(by_source, input_splits, output_splits, ep);
      });
}

}  // namespace titan::parallel
