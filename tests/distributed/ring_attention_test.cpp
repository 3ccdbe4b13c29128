// Ring attention (parallel/context_parallel.h) on every rank of the job
// against flash attention over the whole sequence computed by each rank
// alone: output and q/k/v gradients of this rank's slice, for every mask kind,
// both rotate methods, with and without load balancing, f32 and bf16, GQA;
// and with gpt-oss's attention sinks and a value head dim other than q/k's
// (the sinks' gradient summed over the ranks, as data parallelism would).
// Plus the load balance: chunk pairs computed per rank under a causal mask.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "distributed/mpi_test_support.h"
#include "support/gradcheck.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/nn/functional.h"
#include "titan/parallel/context_parallel.h"

namespace titan::parallel {
namespace ring_attention_test {

using comm::testing::world;

// softcap: documents_window with a logit soft-cap, which each chunk pair's mask must carry.
// sinks_value_dim: documents_window with attention sinks (counted once per
// query row, however many pieces it merges) and Dv != D.
enum class MaskKind { causal, none, window, documents, documents_window, softcap, sinks_value_dim };

const char* name_of(MaskKind kind) {
  switch (kind) {
    case MaskKind::causal:
      return "causal";
    case MaskKind::none:
      return "none";
    case MaskKind::window:
      return "window";
    case MaskKind::documents:
      return "documents";
    case MaskKind::documents_window:
      return "documents_window";
    case MaskKind::softcap:
      return "softcap";
    case MaskKind::sinks_value_dim:
      return "sinks_value_dim";
  }
  return "?";
}

// Packed documents of 45 tokens (a different offset per batch row), so
// documents straddle chunk and rank boundaries.
Tensor packed_documents(int64_t batch, int64_t len) {
  std::vector<int64_t> ids(static_cast<size_t>(batch * len));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < len; ++j) ids[static_cast<size_t>(b * len + j)] = (j + 17 * b) / 45;
  }
  return Tensor::from_vector(ids, {batch, len});
}

ops::AttentionMask mask_of(MaskKind kind, int64_t batch, int64_t len) {
  ops::AttentionMask mask(kind != MaskKind::none);
  const bool sinks = kind == MaskKind::sinks_value_dim;
  const bool window =
      kind == MaskKind::window || kind == MaskKind::documents_window || kind == MaskKind::softcap || sinks;
  const bool documents =
      kind == MaskKind::documents || kind == MaskKind::documents_window || kind == MaskKind::softcap || sinks;
  if (window) mask.sliding_window = 60;
  if (documents) mask.document_ids = packed_documents(batch, len);
  // Small enough to bend the unit-variance scores visibly: a ring that dropped it would fail.
  if (kind == MaskKind::softcap) mask.logit_softcap = 1.5f;
  return mask;
}

struct AttentionRun {
  Tensor out, grad_q, grad_k, grad_v, grad_sinks;
};

using Case = std::tuple<MaskKind, std::string, bool, DType>;  // mask, rotate method, balanced, dtype

std::string case_name(const Case& c) {
  return std::string(name_of(std::get<0>(c))) + "_" + std::get<1>(c) + (std::get<2>(c) ? "_headtail" : "_none") + "_" +
         dtype_name(std::get<3>(c));
}

class RingAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(RingAttentionTest, MatchesFlashOverTheWholeSequence) {
  const auto& [kind, method, balanced, dtype] = GetParam();
  comm::ProcessGroup& group = world();
  // Chunks of 70 positions: not a multiple of the kernel's 128-row tiles.
  const bool sinks = kind == MaskKind::sinks_value_dim;
  const int64_t batch = 2, chunk = 70, len = 2 * group.size() * chunk, heads = 4, kv_heads = 2, dim = 16;
  const int64_t value_dim = sinks ? 24 : dim;
  const SequenceLayout layout{len, group.size(), balanced};
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const ops::AttentionMask mask = mask_of(kind, batch, len);
  // Every rank draws the same inputs; bf16 runs see them rounded.
  const auto input = [&](const Shape& shape, uint64_t seed) {
    return titan::testing::random_leaf(shape, seed).detach().to(dtype);
  };
  const Tensor q = input({batch, len, heads, dim}, 1), k = input({batch, len, kv_heads, dim}, 2),
               v = input({batch, len, kv_heads, value_dim}, 3), upstream = input({batch, len, heads, value_dim}, 4);
  // Sink logits of the scores' own scale (f32 in both dtypes, as parameters are).
  const Tensor sink_logits = sinks ? titan::testing::random_leaf({heads}, 6, 1.5).detach() : Tensor();

  // `attend` gets the mask to use, its sinks a fresh leaf of this run.
  const auto run = [&](const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& up,
                       ops::AttentionMask run_mask, auto&& attend) {
    Tensor ql = q_in.clone(), kl = k_in.clone(), vl = v_in.clone();
    for (Tensor* t : {&ql, &kl, &vl}) t->set_requires_grad(true);
    if (sinks) run_mask.sinks = sink_logits.clone().set_requires_grad(true);
    const Tensor out = attend(ql, kl, vl, run_mask);
    autograd::backward({F::sum(F::mul(F::cast(out, DType::f32), F::cast(up, DType::f32)))});
    return AttentionRun{out.detach(), ql.grad(), kl.grad(), vl.grad(), sinks ? run_mask.sinks.grad() : Tensor()};
  };
  const AttentionRun whole =
      run(q, k, v, upstream, mask, [&](const Tensor& a, const Tensor& b, const Tensor& c, const ops::AttentionMask& m) {
        return F::scaled_dot_product_attention(a, b, c, m, scale, F::AttentionImpl::flash);
      });
  const RingAttention ring(comm::World::instance().group(), parse_rotate_method(method), balanced);
  ops::AttentionMask local_mask = mask;
  local_mask.document_ids = shard_sequence(mask.document_ids, layout, group.rank());
  const AttentionRun sliced =
      run(shard_sequence(q, layout, group.rank()), shard_sequence(k, layout, group.rank()),
          shard_sequence(v, layout, group.rank()), shard_sequence(upstream, layout, group.rank()), local_mask,
          [&](const Tensor& a, const Tensor& b, const Tensor& c, const ops::AttentionMask& m) {
            return ring(a, b, c, m, scale);
          });

  const auto expect_close = [&](const Tensor& actual, const Tensor& expected_whole, const char* what) {
    SCOPED_TRACE(what);
    const Tensor expected = shard_sequence(expected_whole, layout, group.rank());
    ASSERT_EQ(actual.shape(), expected.shape());
    // f32: the merge re-associates the softmax sums (a few ulps); bf16: the
    // pieces and per-pair gradients are rounded to bf16 before they are summed.
    const double rtol = dtype == DType::f32 ? 1e-5 : 2e-2;
    const double atol = rtol * titan::testing::max_abs(expected);
    EXPECT_TRUE(titan::testing::all_close(actual.to(DType::f32), expected.to(DType::f32), atol, rtol));
  };
  expect_close(sliced.out, whole.out, "out");
  expect_close(sliced.grad_q, whole.grad_q, "grad_q");
  expect_close(sliced.grad_k, whole.grad_k, "grad_k");
  expect_close(sliced.grad_v, whole.grad_v, "grad_v");
  if (sinks) {
    // Each rank's share covers its own queries; the shares sum to the whole's.
    const Tensor total = sliced.grad_sinks.contiguous().clone();
    group.all_reduce(total, comm::ReduceOp::sum)->wait();
    const double rtol = dtype == DType::f32 ? 1e-5 : 2e-2;
    EXPECT_TRUE(
        titan::testing::all_close(total, whole.grad_sinks, rtol * titan::testing::max_abs(whole.grad_sinks), rtol))
        << "grad_sinks";
    // A ring that dropped the sinks (or counted them per piece) would miss: they must move the output.
    const Tensor plain = F::scaled_dot_product_attention(q, k, v, mask, scale, F::AttentionImpl::flash);
    EXPECT_FALSE(titan::testing::all_close(plain.to(DType::f32), whole.out.to(DType::f32), 0.05, 0.05));
  }
}

INSTANTIATE_TEST_SUITE_P(RingAttention, RingAttentionTest,
                         ::testing::Combine(::testing::Values(MaskKind::causal, MaskKind::none, MaskKind::window,
                                                              MaskKind::documents, MaskKind::documents_window,
                                                              MaskKind::softcap, MaskKind::sinks_value_dim),
                                            ::testing::Values("allgather", "alltoall"), ::testing::Bool(),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         [](const auto& info) { return case_name(info.param); });

// Under a causal mask each rank computes its chunk pairs: with head-tail
// chunks every rank 2 cp + 1, without them rank r computes 4 r + 3.
std::vector<int64_t> causal_pairs_per_rank(bool balanced) {
  comm::ProcessGroup& group = world();
  const int64_t chunk = 32, len = 2 * group.size() * chunk;
  const SequenceLayout layout{len, group.size(), balanced};
  const Tensor q = titan::testing::random_leaf({1, len, 2, 8}, 5).detach();
  const RingAttention ring(comm::World::instance().group(), RotateMethod::alltoall, balanced);
  const Tensor local = shard_sequence(q, layout, group.rank());
  ring(local, local, local, ops::AttentionMask(true), 0.3f);
  const Tensor all = Tensor::zeros({group.size()}, DType::i64);
  group.all_gather(all, comm::testing::i64_tensor({ring.stats().chunk_pairs}))->wait();
  return all.to_ints();
}

TEST(RingAttention, HeadTailChunksBalanceTheCausalWork) {
  const std::vector<int64_t> pairs = causal_pairs_per_rank(true);
  for (int64_t count : pairs) EXPECT_EQ(count, 2 * world().size() + 1);
}

TEST(RingAttention, ContiguousSlicesLeaveTheLastRankTheMostWork) {
  const std::vector<int64_t> pairs = causal_pairs_per_rank(false);
  for (size_t rank = 0; rank < pairs.size(); ++rank) EXPECT_EQ(pairs[rank], 4 * static_cast<int64_t>(rank) + 3);
  EXPECT_GT(pairs.back(), 2 * pairs.front());
}

TEST(RingAttention, GatherUndoesTheShard) {
  const int64_t len = 4 * world().size() * 3;
  for (bool balanced : {true, false}) {
    const SequenceLayout layout{len, world().size(), balanced};
    const Tensor x = titan::testing::random_leaf({2, len, 3}, 9).detach();
    const Tensor back = gather_sequence_chunks(shard_sequence(x, layout, world().rank()), layout, world());
    EXPECT_EQ(back.to_floats(), x.to_floats());
  }
}

}  // namespace ring_attention_test
}  // namespace titan::parallel
