// An ordered collection of child modules under names the caller gives, so a
// decoder's blocks are named by their layer id ("layers.12.attention.wq.weight")
// whichever layers a model part holds: checkpoints never depend on the split.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/error.h"
#include "titan/nn/module.h"

namespace titan::nn {

template <typename M>
class ModuleDict : public Module {
 public:
  void insert(const std::string& key, std::shared_ptr<M> module) {
    for (const auto& [existing, item] : items_) TITAN_CHECK(existing != key, "ModuleDict: duplicate key '{}'", key);
    register_module(key, module);
    items_.emplace_back(key, std::move(module));
  }
  size_t size() const { return items_.size(); }
  // The module under `key`, or null.
  std::shared_ptr<M> find(const std::string& key) const {
    for (const auto& [existing, item] : items_) {
      if (existing == key) return item;
    }
    return nullptr;
  }
  void erase(const std::string& key) {
    const auto found = std::find_if(items_.begin(), items_.end(), [&](const auto& item) { return item.first == key; });
    TITAN_CHECK(found != items_.end(), "ModuleDict: no key '{}'", key);
    items_.erase(found);
    remove_child(key);
  }
  // By position, in insertion order.
  const std::shared_ptr<M>& operator[](size_t i) const { return items_[i].second; }
  const std::string& key(size_t i) const { return items_[i].first; }

  class Iterator {
   public:
    explicit Iterator(typename std::vector<std::pair<std::string, std::shared_ptr<M>>>::const_iterator it) : it_(it) {}
    const std::shared_ptr<M>& operator*() const { return it_->second; }
    Iterator& operator++() {
      ++it_;
      return *this;
    }
    bool operator!=(const Iterator& other) const { return it_ != other.it_; }

   private:
    typename std::vector<std::pair<std::string, std::shared_ptr<M>>>::const_iterator it_;
  };
  // Iterates the modules (not the keys), in insertion order.
  Iterator begin() const { return Iterator(items_.begin()); }
  Iterator end() const { return Iterator(items_.end()); }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<M>>> items_;
};

}  // namespace titan::nn
