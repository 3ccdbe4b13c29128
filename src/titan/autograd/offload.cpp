#include "titan/autograd/offload.h"

#include <algorithm>

#include "titan/autograd/function_node.h"
#include "titan/autograd/grad_mode.h"

namespace titan::autograd {

ActivationOffloader::ActivationOffloader(int64_t blocks) : blocks_(static_cast<size_t>(blocks)) {}

ActivationOffloader::~ActivationOffloader() {
  release_copied_out();
  for (Block& block : blocks_) {
    for (Saved& saved : block.saved) {
      if (saved.host != nullptr) engine_->free_host(saved.host);
    }
  }
}

Tensor ActivationOffloader::run(int64_t index, const std::function<Tensor(const Tensor&)>& body, const Tensor& x) {
  if (!grad_enabled()) return body(x);
  std::vector<std::shared_ptr<Storage>> created;
  Tensor y;
  {
    StorageWatch watch;
    y = body(x);
    created = watch.alive();
  }
  // The previous block's copies out had this block's forward to finish.
  release_copied_out();
  if (index + 1 >= static_cast<int64_t>(blocks_.size()) || !y.requires_grad()) return y;
  std::erase_if(created, [&](const std::shared_ptr<Storage>& s) {
    return s == y.storage() || s == x.storage() || !s->owns_memory() || !s->has_memory() || s->kept_on_device() ||
           s->device().is_meta() || s->nbytes() < kMinBytes;
  });
  offload(index, created);
  // An identity whose backward brings this block's activations back before
  // any of its backward functions run, and starts on the block before it.
  Tensor out = y.detach();
  std::weak_ptr<ActivationOffloader> self = weak_from_this();
  record("OffloadedBlockBackward", {&y}, {&out}, [self, index](const std::vector<Tensor>& grads) {
    if (auto offloader = self.lock()) offloader->before_backward_of(index);
    return grads;
  });
  return out;
}

void ActivationOffloader::offload(int64_t index, const std::vector<std::shared_ptr<Storage>>& storages) {
  Block& block = blocks_[static_cast<size_t>(index)];
  TITAN_CHECK(block.saved.empty() || !block.on_host,
              "activation offload: block {} ran forward again before its backward", index);
  if (index == 0) offloaded_bytes_ = 0;
  if (storages.empty()) return;
  if (engine_ == nullptr) engine_ = &host_swap_engine(storages.front()->device().type);
  // Host buffers are kept from step to step: the same block saves the same sizes.
  std::vector<Saved> previous = std::move(block.saved);
  block.saved.clear();
  engine_->after_compute();
  for (size_t i = 0; i < storages.size(); ++i) {
    Saved saved{storages[i], nullptr, 0};
    if (i < previous.size() && previous[i].host_bytes == storages[i]->nbytes()) {
      saved.host = std::exchange(previous[i].host, nullptr);
      saved.host_bytes = previous[i].host_bytes;
    } else {
      saved.host = engine_->allocate_host(storages[i]->nbytes());
      saved.host_bytes = storages[i]->nbytes();
    }
    engine_->copy_to_host(saved.host, storages[i]->data(), storages[i]->nbytes());
    offloaded_bytes_ += static_cast<int64_t>(storages[i]->nbytes());
    block.saved.push_back(std::move(saved));
  }
  for (Saved& unused : previous) {
    if (unused.host != nullptr) engine_->free_host(unused.host);
  }
  block.copied = engine_->mark();
  block.on_host = true;
  block.restoring = false;
  copying_out_.push_back(index);
}

void ActivationOffloader::release_copied_out() {
  for (int64_t index : copying_out_) {
    Block& block = blocks_[static_cast<size_t>(index)];
    engine_->host_wait(block.copied);
    for (Saved& saved : block.saved) saved.storage->release_memory();
  }
  copying_out_.clear();
}

void ActivationOffloader::restore(int64_t index) {
  Block& block = blocks_[static_cast<size_t>(index)];
  if (!block.on_host || block.restoring) return;
  for (Saved& saved : block.saved) saved.storage->reallocate();
  // The reallocated memory may have served kernels queued just now.
  engine_->after_compute();
  for (Saved& saved : block.saved) engine_->copy_to_device(saved.storage->data(), saved.host, saved.host_bytes);
  block.copied = engine_->mark();
  block.restoring = true;
}

void ActivationOffloader::before_backward_of(int64_t index) {
  release_copied_out();
  Block& block = blocks_[static_cast<size_t>(index)];
  if (block.on_host) {
    restore(index);
    engine_->compute_wait(block.copied);
    block.on_host = false;
    block.restoring = false;
    // The graph holds the storages from here; the host buffers stay for the next step.
    for (Saved& saved : block.saved) saved.storage.reset();
  }
  if (index > 0) restore(index - 1);  // prefetch: overlaps this block's backward
}

}  // namespace titan::autograd
