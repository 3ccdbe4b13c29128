// A group of processes that run collectives together. Backends: `mpi` (CPU
// tensors, Open MPI) and `nccl` (CUDA tensors). Every collective returns a
// Work handle at once and runs in the background, so communication overlaps
// compute; waiting past the group's timeout ends the whole job with a message
// naming this rank and the collective, never a silent hang.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::comm {

enum class ReduceOp { sum, avg, max };
const char* reduce_op_name(ReduceOp op);

// Time spent in collectives, for the metrics: `busy` is how long collectives
// ran, `exposed` how long callers waited for them (busy - exposed overlapped compute).
// `bytes` is each call's larger buffer (input or output: nccl-tests' "size").
// The cross_node_* figures are the part of these whose group spans nodes
// (ProcessGroup::spans_nodes): traffic that leaves the node, usually over a
// network several times slower than the links inside it. Intra-node is the rest.
struct CommStats {
  double busy_seconds = 0.0;
  double exposed_seconds = 0.0;
  int64_t collectives = 0;
  int64_t bytes = 0;
  int64_t cross_node_collectives = 0;
  int64_t cross_node_bytes = 0;
  double cross_node_busy_seconds = 0.0;

  // One call of `bytes` issued on a group that does or does not span nodes.
  void count_call(int64_t call_bytes, bool cross_node) {
    collectives += 1;
    bytes += call_bytes;
    if (cross_node) {
      cross_node_collectives += 1;
      cross_node_bytes += call_bytes;
    }
  }
  // `seconds` of a call's run time.
  void add_busy(double seconds, bool cross_node) {
    busy_seconds += seconds;
    if (cross_node) cross_node_busy_seconds += seconds;
  }
  CommStats& operator+=(const CommStats& other) {
    busy_seconds += other.busy_seconds;
    exposed_seconds += other.exposed_seconds;
    collectives += other.collectives;
    bytes += other.bytes;
    cross_node_collectives += other.cross_node_collectives;
    cross_node_bytes += other.cross_node_bytes;
    cross_node_busy_seconds += other.cross_node_busy_seconds;
    return *this;
  }
};

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective finished; rethrows its error.
  virtual void wait() = 0;
  virtual bool completed() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // All tensors contiguous, on the backend's device. In place for all_reduce
  // and broadcast. all_gather: output holds size() inputs back to back in rank
  // order; reduce_scatter: input holds size() blocks, rank r keeps the
  // reduction of block r. all_to_all: rank r sends input rows
  // [sum(input_splits[:p]), +input_splits[p]) to rank p and receives
  // output_splits[p] rows from it (splits in rows of dim 0).
  virtual std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) = 0;
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) = 0;
  virtual std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) = 0;
  virtual std::shared_ptr<Work> all_to_all(const Tensor& output, const Tensor& input,
                                           const std::vector<int64_t>& output_splits,
                                           const std::vector<int64_t>& input_splits) = 0;
  virtual std::shared_ptr<Work> send(const Tensor& tensor, int peer, int tag) = 0;
  virtual std::shared_ptr<Work> recv(const Tensor& tensor, int peer, int tag) = 0;
  virtual void barrier() = 0;

  // Splits this group into sub-groups: members passing the same `color` form
  // one, ordered by `key`. Every member must call it (it is a collective).
  virtual std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name) = 0;
  // split() when the caller knows how many members each sub-group has (a
  // device mesh's axes): checked against what split() found; a fake group,
  // which has no peers to ask, is built from it.
  virtual std::shared_ptr<ProcessGroup> split_axis(int color, int key, int members, const std::string& name);

  virtual CommStats stats() const = 0;
  virtual void reset_stats() = 0;

  // Whether this group's members sit on more than one node, so that its
  // collectives cross nodes. A group cannot tell by itself (its backend knows
  // ranks, not nodes): whoever knows every rank's node, the device mesh, marks
  // it after creating it. Backends count its calls as cross-node in their
  // CommStats and the flight recorder marks its records. Default: false.
  bool spans_nodes() const { return spans_nodes_.load(std::memory_order_relaxed); }
  virtual void set_spans_nodes(bool spans) { spans_nodes_.store(spans, std::memory_order_relaxed); }

 protected:
  ProcessGroup(int rank, int size, std::string name) : rank_(rank), size_(size), name_(std::move(name)) {}

 private:
  int rank_, size_;
  std::string name_;
  std::atomic<bool> spans_nodes_{false};
};

// A Work that has already finished: what backends without peers (a group of
// one, a fake group) return from every collective.
std::shared_ptr<Work> completed_work();

// Every member's `mine` (the same count of host numbers on each), as
// result[value][rank]: for metrics that report each rank's own figures.
std::vector<std::vector<double>> gather_per_rank(ProcessGroup& group, const std::vector<double>& mine);

// `value` reduced over the group's members, through an f32 collective (so
// rounded to f32 when the group has more than one member): for host figures
// such as a step's loss.
double all_reduce_scalar(ProcessGroup& group, double value, ReduceOp op);

// Checks shared by backends: shapes and dtypes that fit each collective.
void check_all_gather(const ProcessGroup& group, const Tensor& output, const Tensor& input);
void check_reduce_scatter(const ProcessGroup& group, const Tensor& output, const Tensor& input);
// avg is a floating-point reduction: integer tensors would truncate (NCCL) or fail mid-collective (MPI).
void check_reduce_op(const ProcessGroup& group, const char* what, DType dtype, ReduceOp op);
// Split sizes that match size() peers and the rows of both tensors, whose rows
// (dims after the first) agree. Returns the elements in one row.
int64_t check_all_to_all(const ProcessGroup& group, const Tensor& output, const Tensor& input,
                         const std::vector<int64_t>& output_splits, const std::vector<int64_t>& input_splits);

}  // namespace titan::comm
