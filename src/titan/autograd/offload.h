// Activation offload: after a block's forward, the activations it saved for
// backward are copied to host memory beside the next block's compute and
// their device memory is freed; during backward each block's activations are
// copied back while the block after it (in backward order) computes. Device
// memory for activations becomes about two blocks' worth, at the cost of bus
// traffic that overlaps compute.
//
// Saved activations are found, not declared: the storages a block's forward
// allocated that are still alive when it returns (minus its output) are what
// its backward holds on to. The graph keeps the same Storage objects; only
// their bytes move, so no backward function knows offload exists.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "titan/core/host_swap.h"
#include "titan/core/tensor.h"

namespace titan::autograd {

class ActivationOffloader : public std::enable_shared_from_this<ActivationOffloader> {
 public:
  // Storages smaller than this stay on the device: moving them costs more
  // in bookkeeping than the memory is worth.
  static constexpr size_t kMinBytes = 64 * 1024;

  explicit ActivationOffloader(int64_t blocks);
  ~ActivationOffloader();

  // Runs block `index` of the model (forward order 0..blocks-1). The last
  // block's activations stay: backward needs them first.
  Tensor run(int64_t index, const std::function<Tensor(const Tensor&)>& body, const Tensor& x);

  // Bytes moved to the host by the last forward (for tests and reports).
  int64_t offloaded_bytes() const { return offloaded_bytes_; }

 private:
  struct Saved {
    std::shared_ptr<Storage> storage;
    void* host = nullptr;
    size_t host_bytes = 0;
  };
  struct Block {
    std::vector<Saved> saved;
    std::shared_ptr<void> copied;  // marker after this block's copies (out, then in)
    bool on_host = false;          // device memory released, bytes on the host
    bool restoring = false;        // copies back queued
  };

  void offload(int64_t index, const std::vector<std::shared_ptr<Storage>>& storages);
  void release_copied_out();
  void restore(int64_t index);
  void before_backward_of(int64_t index);

  std::vector<Block> blocks_;
  std::vector<int64_t> copying_out_;  // blocks whose device memory waits for its copies out
  HostSwapEngine* engine_ = nullptr;
  int64_t offloaded_bytes_ = 0;
};

}  // namespace titan::autograd
