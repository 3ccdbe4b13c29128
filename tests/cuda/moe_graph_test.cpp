// One MoE layer's routing on CUDA (router scores, top-k, expert order, rows,
// the grouped GEMM, combine and the two GEMM gradients) recorded into a CUDA
// graph and replayed on new scores, against eager runs: nothing in it may
// read the device from the host.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "support/cuda.h"
#include "support/cuda_compare.h"
#include "titan/core/copy.h"
#include "titan/core/step_recorder.h"
#include "titan/ops/grouped_gemm.h"
#include "titan/ops/moe_routing.h"

namespace titan::testing {
namespace moe_graph_test {

Tensor from_floats(const std::vector<float>& values, const Shape& shape, DType dtype = DType::f32) {
  return Tensor::from_floats(values, shape).to(dtype);
}

struct MoeOutputs {
  Tensor order, counts, out, grad_x, grad_w;
};

// Router scores -> top-k -> expert order -> rows -> expert GEMM -> combine,
// and the two GEMM gradients: the device work of one MoE layer's routing.
MoeOutputs route(const Tensor& scores, const Tensor& x, const Tensor& w, int64_t k) {
  const ops::TopK top = ops::topk(scores, k);
  const Tensor weights = ops::normalize_rows(top.values);
  const ops::ExpertOrder order = ops::expert_order(top.indices, scores.size(1));
  const Tensor rows = ops::permute_tokens(x, order.order, k);
  const Tensor expert_rows = ops::grouped_gemm(rows, w, order.counts);
  const Tensor out = ops::combine_experts(expert_rows, order.inverse, weights);
  const ops::CombineGrads grads = ops::combine_experts_backward(out, expert_rows, order.inverse, weights);
  const Tensor grad_rows = ops::grouped_gemm_input_grad(grads.grad_rows, w, order.counts);
  return {order.order, order.counts, out, ops::unpermute_sum(grad_rows, order.inverse, k),
          ops::grouped_gemm_weight_grad(grads.grad_rows, rows, order.counts)};
}

// Nothing in the routing reads the device from the host: it records into a
// graph under NoHostReadsScope, and replays on new scores (new counts) give
// the eager run's bits.
TEST(CudaMoe, RoutingRecordsIntoAGraphAndReplaysLikeEager) {
  TITAN_REQUIRE_CUDA();
  const int64_t tokens = 300, experts = 16, k = 4, dim = 48, hidden = 80;
  const Tensor x = on_cuda(random_cpu({tokens, dim}, DType::f32, 50));
  const Tensor w = on_cuda(random_cpu({experts, hidden, dim}, DType::f32, 51));
  // Positive scores: normalize_rows's sums stay away from zero.
  const Tensor scores = on_cuda(random_cpu({tokens, experts}, DType::f32, 52, 0.01, 1.0));
  MoeOutputs recorded;
  std::unique_ptr<StepRecorder> recorder = make_step_recorder(DeviceType::cuda);
  recorder->begin();
  {
    NoHostReadsScope no_reads("the recorded MoE routing");
    recorded = route(scores, x, w, k);
  }
  recorder->end();
  for (uint32_t seed : {53u, 54u}) {
    SCOPED_TRACE("scores seed " + std::to_string(seed));
    // The second set sends almost every token to experts 0..3, leaving the rest empty.
    Tensor next = random_cpu({tokens, experts}, DType::f32, seed, 0.01, 1.0);
    if (seed == 54u) {
      std::vector<float> v = next.to_floats();
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t e = 0; e < 4; ++e) v[static_cast<size_t>(t * experts + e)] += 2.0f;
      }
      next = from_floats(v, {tokens, experts});
    }
    titan::copy_(scores, on_cuda(next));
    recorder->replay();
    const MoeOutputs eager = route(scores, x, w, k);
    EXPECT_TRUE(same_bits(recorded.order, on_cpu(eager.order)));
    EXPECT_TRUE(same_bits(recorded.counts, on_cpu(eager.counts)));
    EXPECT_TRUE(same_bits(recorded.out, on_cpu(eager.out)));
    EXPECT_TRUE(same_bits(recorded.grad_x, on_cpu(eager.grad_x)));
    EXPECT_TRUE(same_bits(recorded.grad_w, on_cpu(eager.grad_w)));
    // And the counts are the CPU's for these scores.
    EXPECT_TRUE(same_bits(recorded.counts, ops::expert_order(ops::topk(next, k).indices, experts).counts));
  }
}

}  // namespace moe_graph_test
}  // namespace titan::testing
