// An ordered list of child modules named "0", "1", ... so their parameters
// get the "layers.3.attention.wq.weight" names checkpoints expect.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "titan/nn/module.h"

namespace titan::nn {

template <typename M>
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(items_.size()), module);
    items_.push_back(std::move(module));
  }
  size_t size() const { return items_.size(); }
  const std::shared_ptr<M>& operator[](size_t i) const { return items_[i]; }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace titan::nn
