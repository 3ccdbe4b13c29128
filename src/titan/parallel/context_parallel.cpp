#include "titan/parallel/context_parallel.h"

#include <chrono>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "titan/autograd/function_node.h"
#include "titan/core/copy.h"
#include "titan/ops/elementwise.h"

namespace titan::parallel {

std::array<int64_t, 2> SequenceLayout::chunks(int64_t rank) const {
  if (balanced) return {rank, 2 * ranks - 1 - rank};
  return {2 * rank, 2 * rank + 1};
}

void SequenceLayout::check(const std::string& where) const {
  TITAN_CHECK(ranks >= 1 && seq_len > 0 && seq_len % (2 * ranks) == 0,
              "{}: a sequence of {} tokens does not cut into 2 x {} equal chunks for context parallelism (make it a "
              "multiple of {})",
              where, seq_len, ranks, 2 * ranks);
}

Tensor shard_sequence(const Tensor& x, const SequenceLayout& layout, int64_t rank) {
  if (!x.defined() || layout.ranks == 1) return x;
  TITAN_CHECK(x.dim() >= 2 && x.size(1) == layout.seq_len, "context parallelism: {} is not [B, {}, ...]",
              shape_str(x.shape()), layout.seq_len);
  Shape shape = x.shape();
  const int64_t chunk = layout.chunk_len();
  shape[1] = 2 * chunk;
  Tensor local = Tensor::empty(shape, x.dtype(), x.device());
  const std::array<int64_t, 2> chunks = layout.chunks(rank);
  for (int64_t i = 0; i < 2; ++i) {
    titan::copy_(local.narrow(1, i * chunk, chunk), x.narrow(1, chunks[static_cast<size_t>(i)] * chunk, chunk));
  }
  return local;
}

Tensor gather_sequence_chunks(const Tensor& local, const SequenceLayout& layout, comm::ProcessGroup& group) {
  const int64_t ranks = group.size(), chunk = layout.chunk_len();
  Shape stacked_shape = local.shape();
  stacked_shape.insert(stacked_shape.begin(), ranks);
  const Tensor stacked = Tensor::empty(stacked_shape, local.dtype(), local.device());
  group.all_gather(stacked, local.contiguous())->wait();
  Shape shape = local.shape();
  shape[1] = layout.seq_len;
  Tensor whole = Tensor::empty(shape, local.dtype(), local.device());
  for (int64_t rank = 0; rank < ranks; ++rank) {
    const std::array<int64_t, 2> chunks = layout.chunks(rank);
    for (int64_t i = 0; i < 2; ++i) {
      titan::copy_(whole.narrow(1, chunks[static_cast<size_t>(i)] * chunk, chunk),
                   stacked.select(0, rank).narrow(1, i * chunk, chunk));
    }
  }
  return whole;
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Adds the seconds from construction to destruction to a counter.
class Timed {
 public:
  explicit Timed(double& total) : total_(total), start_(Clock::now()) {}
  ~Timed() { total_ += std::chrono::duration<double>(Clock::now() - start_).count(); }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  double& total_;
  Clock::time_point start_;
};

// One rank's keys and values (and, in backward, their gradients).
struct KeyValue {
  Tensor k, v;
};

// What one ring-attention call shares between its forward and backward: the
// layout, the mask, every rank's document ids, and the chunk pairs' masks.
class RingProblem {
 public:
  RingProblem(const comm::ProcessGroup& group, bool balanced, int64_t local_len, const ops::AttentionMask& mask,
              float scale, const Tensor& all_documents)
      : layout_{local_len * group.size(), group.size(), balanced},
        rank_(group.rank()),
        causal_(mask.causal),
        window_(mask.sliding_window),
        softcap_(mask.logit_softcap),
        scale_(scale),
        all_documents_(all_documents),
        sinks_(mask.sinks.defined() ? mask.sinks.detach().contiguous() : Tensor()) {}

  int64_t chunk() const { return layout_.chunk_len(); }
  float scale() const { return scale_; }
  // [Hq] f32 attention sinks or undefined. Never part of a pair's mask: a query
  // row counts its sink once, folded in after its pieces merge.
  const Tensor& sinks() const { return sinks_; }

  // The mask between this rank's query chunk qi and source rank's key chunk
  // ki, or nothing when it hides every pair of positions.
  std::optional<ops::AttentionMask> pair_mask(int64_t source, int64_t qi, int64_t ki) const {
    const int64_t c = chunk();
    const int64_t query_start = layout_.chunks(rank_)[static_cast<size_t>(qi)] * c;
    const int64_t key_start = layout_.chunks(source)[static_cast<size_t>(ki)] * c;
    if (causal_ && key_start > query_start + c - 1) return std::nullopt;
    if (window_ > 0 && query_start - (key_start + c - 1) >= window_) return std::nullopt;
    ops::AttentionMask mask(causal_, window_);
    mask.query_start = query_start;
    mask.key_start = key_start;
    mask.logit_softcap = softcap_;  // per score, so each piece caps its own and the lse merge is unchanged
    if (all_documents_.defined()) {
      mask.document_ids = all_documents_.select(0, source).narrow(1, ki * c, c);
      mask.query_document_ids = all_documents_.select(0, rank_).narrow(1, qi * c, c);
    }
    return mask;
  }

 private:
  SequenceLayout layout_;
  int64_t rank_;
  bool causal_;
  int64_t window_;
  float softcap_;
  float scale_;
  Tensor all_documents_;  // [cp, B, S/cp] or undefined
  Tensor sinks_;
};

Tensor chunk_of(const Tensor& x, int64_t index, int64_t chunk) { return x.narrow(1, index * chunk, chunk); }

// Visits every rank's K/V once, this rank's own first, handing each to
// `visit(source, kv)`. allgather: one all-gather, then the sources in ring
// order. alltoall: rank r receives source r - s - 1 from r - 1 while it
// computes on source r - s, then passes it on to r + 1.
template <typename Visit>
void rotate_key_values(comm::ProcessGroup& group, RotateMethod method, const KeyValue& own, RingAttentionStats& stats,
                       Visit&& visit) {
  const int64_t ranks = group.size(), rank = group.rank();
  if (method == RotateMethod::allgather) {
    KeyValue all;
    {
      Timed waited(stats.wait_seconds);
      for (auto [from, to] : {std::pair{&own.k, &all.k}, std::pair{&own.v, &all.v}}) {
        Shape shape = from->shape();
        shape.insert(shape.begin(), ranks);
        *to = Tensor::empty(shape, from->dtype(), from->device());
        group.all_gather(*to, from->contiguous())->wait();
      }
    }
    for (int64_t step = 0; step < ranks; ++step) {
      const int64_t source = (rank - step + ranks) % ranks;
      visit(source, KeyValue{all.k.select(0, source), all.v.select(0, source)});
    }
    return;
  }
  const int next = static_cast<int>((rank + 1) % ranks), previous = static_cast<int>((rank - 1 + ranks) % ranks);
  KeyValue current{own.k.contiguous(), own.v.contiguous()};
  for (int64_t step = 0; step < ranks; ++step) {
    std::vector<std::shared_ptr<comm::Work>> transfers;
    KeyValue incoming;
    if (step + 1 < ranks) {
      incoming = {Tensor::empty(current.k.shape(), current.k.dtype(), current.k.device()),
                  Tensor::empty(current.v.shape(), current.v.dtype(), current.v.device())};
      const int tag = static_cast<int>(2 * step);
      transfers.push_back(group.recv(incoming.k, previous, tag));
      transfers.push_back(group.recv(incoming.v, previous, tag + 1));
      transfers.push_back(group.send(current.k, next, tag));
      transfers.push_back(group.send(current.v, next, tag + 1));
    }
    visit((rank - step + ranks) % ranks, current);
    Timed waited(stats.wait_seconds);
    for (const auto& transfer : transfers) transfer->wait();
    if (step + 1 < ranks) current = incoming;
  }
}

struct ForwardResult {
  Tensor out;  // [B, S/cp, Hq, Dv], q's dtype
  Tensor lse;  // [B, Hq, S/cp] f32, sinks included
};

ForwardResult ring_forward(comm::ProcessGroup& group, RotateMethod method, const RingProblem& problem, const Tensor& q,
                           const KeyValue& own, RingAttentionStats& stats) {
  const int64_t c = problem.chunk(), batch = q.size(0), heads = q.size(2), value_dim = own.v.size(3);
  std::array<Tensor, 2> out_acc, lse_acc;
  for (size_t i = 0; i < 2; ++i) {
    out_acc[i] = Tensor::zeros({batch, c, heads, value_dim}, DType::f32, q.device());
    lse_acc[i] = Tensor::full({batch, heads, c}, kNegInf, DType::f32, q.device());
  }
  rotate_key_values(group, method, own, stats, [&](int64_t source, const KeyValue& kv) {
    Timed computing(stats.compute_seconds);
    for (int64_t qi = 0; qi < 2; ++qi) {
      for (int64_t ki = 0; ki < 2; ++ki) {
        const std::optional<ops::AttentionMask> mask = problem.pair_mask(source, qi, ki);
        if (!mask) continue;
        ++stats.chunk_pairs;
        const ops::AttentionOutput piece = ops::flash_attention(chunk_of(q, qi, c), chunk_of(kv.k, ki, c),
                                                                chunk_of(kv.v, ki, c), *mask, problem.scale());
        ops::attention_merge_(out_acc[static_cast<size_t>(qi)], lse_acc[static_cast<size_t>(qi)], piece.out, piece.lse);
      }
    }
  });
  ForwardResult result{Tensor::empty({batch, 2 * c, heads, value_dim}, q.dtype(), q.device()),
                       Tensor::empty({batch, heads, 2 * c}, DType::f32, q.device())};
  for (int64_t i = 0; i < 2; ++i) {
    if (problem.sinks().defined()) {
      ops::attention_fold_sinks_(out_acc[static_cast<size_t>(i)], lse_acc[static_cast<size_t>(i)], problem.sinks());
    }
    titan::copy_(chunk_of(result.out, i, c), out_acc[static_cast<size_t>(i)]);
    titan::copy_(result.lse.narrow(2, i * c, c), lse_acc[static_cast<size_t>(i)]);
  }
  return result;
}

// Gradients accumulate in f32 chunk-major buffers [2, B, S/(2 cp), H, D]:
// each chunk is contiguous (add_ needs that) and the whole is one message.
Tensor chunk_major_zeros(const Tensor& like) {
  Shape shape = like.shape();
  shape[1] /= 2;
  shape.insert(shape.begin(), 2);
  return Tensor::zeros(shape, DType::f32, like.device());
}

// Back to [B, S/cp, H, D] in `dtype`.
Tensor from_chunk_major(const Tensor& chunks, DType dtype) {
  Shape shape = chunks.select(0, 0).shape();
  const int64_t c = shape[1];
  shape[1] = 2 * c;
  Tensor out = Tensor::empty(shape, dtype, chunks.device());
  for (int64_t i = 0; i < 2; ++i) titan::copy_(chunk_of(out, i, c), chunks.select(0, i));
  return out;
}

struct BackwardInputs {
  Tensor grad_out, q, out, lse;
};

// Adds this rank's queries' gradient contributions through source's K/V:
// to grad_q (this rank's) and to grad_kv (the source's), all chunk-major f32.
void pair_gradients(const RingProblem& problem, int64_t source, const KeyValue& kv, const BackwardInputs& in,
                    const Tensor& grad_q, const KeyValue& grad_kv, RingAttentionStats& stats) {
  Timed computing(stats.compute_seconds);
  const int64_t c = problem.chunk();
  for (int64_t qi = 0; qi < 2; ++qi) {
    for (int64_t ki = 0; ki < 2; ++ki) {
      const std::optional<ops::AttentionMask> mask = problem.pair_mask(source, qi, ki);
      if (!mask) continue;
      const ops::AttentionGrads grads = ops::flash_attention_backward(
          chunk_of(in.grad_out, qi, c), chunk_of(in.q, qi, c), chunk_of(kv.k, ki, c), chunk_of(kv.v, ki, c),
          chunk_of(in.out, qi, c), in.lse.narrow(2, qi * c, c), *mask, problem.scale());
      ops::add_(grad_q.select(0, qi), grads.grad_q);
      ops::add_(grad_kv.k.select(0, ki), grads.grad_k);
      ops::add_(grad_kv.v.select(0, ki), grads.grad_v);
    }
  }
}

KeyValue gradient_buffers(const KeyValue& kv) { return {chunk_major_zeros(kv.k), chunk_major_zeros(kv.v)}; }

// dq, dk, dv of this rank's slice (and, with sinks, this rank's queries' share
// of the sinks' gradient, which the data-parallel reduction sums like any
// replicated parameter's). With the sinks folded into out and lse, each
// piece's backward is the plain one: P = exp(S - lse) is already sink-aware. allgather: gather K/V again, sum every
// source's gradients here, reduce-scatter them to their owners. alltoall: a
// source's gradients travel one step behind its K/V, each rank adding its
// part, and arrive at the owner after the last step.
std::array<Tensor, 4> ring_backward(comm::ProcessGroup& group, RotateMethod method, const RingProblem& problem,
                                    const BackwardInputs& in, const KeyValue& own, RingAttentionStats& stats) {
  const int64_t ranks = group.size(), rank = group.rank();
  const Tensor grad_q = chunk_major_zeros(in.q);
  KeyValue grad_own;
  if (method == RotateMethod::allgather) {
    std::vector<KeyValue> grads(static_cast<size_t>(ranks));
    rotate_key_values(group, method, own, stats, [&](int64_t source, const KeyValue& kv) {
      grads[static_cast<size_t>(source)] = gradient_buffers(kv);
      pair_gradients(problem, source, kv, in, grad_q, grads[static_cast<size_t>(source)], stats);
    });
    Timed waited(stats.wait_seconds);
    for (Tensor KeyValue::*member : {&KeyValue::k, &KeyValue::v}) {
      const Tensor& first = grads.front().*member;
      Shape shape = first.shape();
      shape.insert(shape.begin(), ranks);
      const Tensor stacked = Tensor::empty(shape, DType::f32, first.device());
      for (int64_t source = 0; source < ranks; ++source) {
        titan::copy_(stacked.select(0, source), grads[static_cast<size_t>(source)].*member);
      }
      grad_own.*member = Tensor::empty(first.shape(), DType::f32, first.device());
      group.reduce_scatter(grad_own.*member, stacked, comm::ReduceOp::sum)->wait();
    }
  } else {
    const int next = static_cast<int>((rank + 1) % ranks), previous = static_cast<int>((rank - 1 + ranks) % ranks);
    // The K/V passes use tags [0, 2 ranks); the gradients' start after them.
    const int tag_base = static_cast<int>(2 * ranks);
    KeyValue sending, arriving;  // this rank's running sum on its way out; the previous rank's on its way in
    std::vector<std::shared_ptr<comm::Work>> sends, receives;
    int64_t step = 0;
    rotate_key_values(group, method, own, stats, [&](int64_t source, const KeyValue& kv) {
      KeyValue mine = gradient_buffers(kv);
      pair_gradients(problem, source, kv, in, grad_q, mine, stats);
      Timed waited(stats.wait_seconds);
      if (step > 0) {
        for (const auto& receive : receives) receive->wait();
        ops::add_(mine.k, arriving.k);
        ops::add_(mine.v, arriving.v);
      }
      for (const auto& send : sends) send->wait();
      sending = std::move(mine);
      const int tag = tag_base + static_cast<int>(2 * step);
      sends = {group.send(sending.k, next, tag), group.send(sending.v, next, tag + 1)};
      // The previous rank's sum for the next source or, after the last step,
      // every rank's for this rank's own K/V.
      arriving = gradient_buffers(kv);
      receives = {group.recv(arriving.k, previous, tag), group.recv(arriving.v, previous, tag + 1)};
      ++step;
    });
    Timed waited(stats.wait_seconds);
    for (const auto& receive : receives) receive->wait();
    for (const auto& send : sends) send->wait();
    grad_own = arriving;
  }
  Tensor grad_sinks;
  if (problem.sinks().defined())
    grad_sinks = ops::attention_sinks_backward(in.grad_out, in.out, in.lse, problem.sinks());
  return {from_chunk_major(grad_q, in.q.dtype()), from_chunk_major(grad_own.k, own.k.dtype()),
          from_chunk_major(grad_own.v, own.v.dtype()), grad_sinks};
}

}  // namespace

RingAttention::RingAttention(std::shared_ptr<comm::ProcessGroup> group, RotateMethod method, bool balanced)
    : group_(std::move(group)), method_(method), balanced_(balanced), stats_(std::make_shared<RingAttentionStats>()) {}

Tensor RingAttention::operator()(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask,
                                 float scale) const {
  TITAN_CHECK(mask.default_layout(), "ring attention: the mask's queries must be this rank's own slice");
  TITAN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(1) == k.size(1) && q.size(1) == v.size(1) &&
                  q.size(1) % 2 == 0,
              "ring attention: q {} and k {} must be this rank's slice of one sequence [B, S/cp, H, D]",
              shape_str(q.shape()), shape_str(k.shape()));
  // Every rank's document ids: a few integers per position, gathered once per call.
  Tensor all_documents;
  if (mask.document_ids.defined()) {
    const Tensor local = mask.document_ids.contiguous();
    all_documents = Tensor::empty({group_->size(), local.size(0), local.size(1)}, local.dtype(), local.device());
    group_->all_gather(all_documents, local)->wait();
  }
  const RingProblem problem(*group_, balanced_, q.size(1), mask, scale, all_documents);
  const KeyValue own{k.detach(), v.detach()};
  const ForwardResult result = ring_forward(*group_, method_, problem, q.detach(), own, *stats_);
  Tensor out = result.out;
  const Tensor saved_q = q.detach(), saved_out = out.detach(), lse = result.lse;
  const std::shared_ptr<comm::ProcessGroup> group = group_;
  const RotateMethod method = method_;
  const std::shared_ptr<RingAttentionStats> stats = stats_;
  const auto backward = [=](const auto& g) {
    const std::array<Tensor, 4> grads =
        ring_backward(*group, method, problem, BackwardInputs{g[0], saved_q, saved_out, lse}, own, *stats);
    std::vector<Tensor> result{grads[0], grads[1], grads[2]};
    if (grads[3].defined()) result.push_back(grads[3]);
    return result;
  };
  if (mask.sinks.defined()) {
    autograd::record("RingAttentionBackward", {&q, &k, &v, &mask.sinks}, {&out}, backward);
  } else {
    autograd::record("RingAttentionBackward", {&q, &k, &v}, {&out}, backward);
  }
  return out;
}

}  // namespace titan::parallel
