// Context parallelism: every sequence is cut along its length over the cp
// ranks, and attention (the one op that mixes positions) becomes ring
// attention: each rank's queries meet every rank's keys and values, one chunk
// pair at a time, merged with running log-sum-exp statistics; the backward
// sends the key/value gradients back to their owners. Everything else in the
// model is position-wise and runs on the rank's slice unchanged.
//
// The sequence is cut into 2 x cp chunks. Without load balancing rank r holds
// chunks 2r and 2r+1 (one contiguous slice); with head-tail balancing it holds
// chunks r and 2cp-1-r, so that under a causal mask every rank computes the
// same number of chunk pairs (2cp+1). Chunk pairs the causal or window mask
// hides entirely are skipped; the kernel skips hidden tiles inside the rest.
//
// Keys and values reach a rank in one of TorchTitan's two ways
// (parallelism.context_parallel_rotate_method): "allgather" gathers every
// rank's K/V before computing (backward gathers again, and reduce-scatters
// the gradients), "alltoall" passes them around a ring of point-to-point
// transfers, the next rank's pair in flight while the current one computes
// (backward: K/V gradients travel with them and arrive at their owner).
#pragma once

#include <array>
#include <memory>
#include <string>

#include "titan/comm/process_group.h"
#include "titan/ops/attention.h"
#include "titan/parallel/context_parallel_options.h"

namespace titan::parallel {

// How a sequence of seq_len positions is cut over `ranks` ranks.
struct SequenceLayout {
  int64_t seq_len = 0;
  int64_t ranks = 1;
  bool balanced = true;  // head-tail chunks

  int64_t chunk_len() const { return seq_len / (2 * ranks); }
  // The two chunks rank `rank` holds, in the order it holds them.
  std::array<int64_t, 2> chunks(int64_t rank) const;
  // Errors naming `where` unless seq_len cuts into 2 x ranks equal chunks.
  void check(const std::string& where) const;
};

// This rank's slice of x [B, S, ...] along dim 1 (its two chunks, in order): a
// copy, for the step's inputs (tokens, labels, positions, document ids).
Tensor shard_sequence(const Tensor& x, const SequenceLayout& layout, int64_t rank);
// The inverse, over the whole group: every rank gets x [B, S, ...] back (tests, evaluation).
Tensor gather_sequence_chunks(const Tensor& local, const SequenceLayout& layout, comm::ProcessGroup& group);

// What ring attention did since the last reset, on this rank.
struct RingAttentionStats {
  int64_t chunk_pairs = 0;       // chunk pairs computed (forward; hidden pairs are skipped)
  double compute_seconds = 0.0;  // in attention kernels and merges, forward and backward
  double wait_seconds = 0.0;     // waiting for K/V (or their gradients) to arrive
};

// The attention core that context parallelism installs in every attention
// layer (nn::Attention::set_core): differentiable, collective over `group`.
// q [B, S/cp, Hq, D], k [B, S/cp, Hkv, D] and v [B, S/cp, Hkv, Dv] are this
// rank's slice; the mask's document_ids, when set, are this rank's slice of
// them too. The mask's sinks (whole: [Hq] of this rank's heads) are folded in
// once per query row, after the pieces merge, and get this rank's queries'
// share of their gradient.
class RingAttention {
 public:
  RingAttention(std::shared_ptr<comm::ProcessGroup> group, RotateMethod method, bool balanced);
  Tensor operator()(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask,
                    float scale) const;

  const RingAttentionStats& stats() const { return *stats_; }
  void reset_stats() const { *stats_ = {}; }

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
  RotateMethod method_;
  bool balanced_;
  std::shared_ptr<RingAttentionStats> stats_;
};

}  // namespace titan::parallel
