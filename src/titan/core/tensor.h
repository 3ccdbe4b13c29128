// Tensor: a strided view (shape, strides, offset, dtype) of a shared Storage on
// one device. Core methods here are views and metadata only and never record
// autograd history; differentiable versions live in nn/functional.h (F::).
// Copies (contiguous, clone, to) go through the device's copy kernel in ops/.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "titan/core/device.h"
#include "titan/core/dtype.h"
#include "titan/core/error.h"
#include "titan/core/storage.h"

namespace titan {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);

// Tag types for the narrow storage formats without native C++ types.
struct f16 {
  uint16_t bits = 0;
};
struct f8e4m3 {
  uint8_t bits = 0;
};
struct f8e5m2 {
  uint8_t bits = 0;
};

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<f16>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<f8e4m3>() {
  return DType::f8e4m3;
}
template <>
constexpr DType dtype_of<f8e5m2>() {
  return DType::f8e5m2;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

namespace autograd {
class Node;
}
struct AutogradMeta;  // core/autograd_meta.h

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::shared_ptr<AutogradMeta> autograd;  // null until autograd needs it
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories -------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // Storage of the right size whose bytes come later (storage()->reallocate()).
  static Tensor unallocated(const Shape& shape, DType dtype, Device device);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
  // Host tensor holding `values` converted to `dtype` (rounded for narrow floats).
  static Tensor from_floats(std::span<const float> values, const Shape& shape, DType dtype = DType::f32);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // Wraps memory owned elsewhere; `release` runs when the last view goes.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device,
                          std::function<void(void*)> release = {});
  static Tensor arange(int64_t n, DType dtype = DType::i64);

  // ---- metadata --------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const { return impl().shape[wrap_dim(d)]; }
  int64_t stride(int64_t d) const { return impl().strides[wrap_dim(d)]; }
  int64_t storage_offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  int64_t numel() const { return shape_numel(impl().shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  size_t element_size() const { return dtype_size(dtype()); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  // Wraps a negative dimension (-1 is the last) and checks the range.
  int64_t wrap_dim(int64_t d) const;

  // Address of element [0, 0, ...]; throws for meta tensors.
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    TITAN_CHECK(dtype() == dtype_of<T>(), "tensor data<{}>() on a {} tensor", dtype_name(dtype_of<T>()),
                dtype_name(dtype()));
    return static_cast<T*>(data_ptr());
  }

  // ---- views (share storage; no autograd history) -----------------------
  Tensor view(const Shape& shape) const;     // needs contiguous; one dim may be -1
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a contiguous copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor slice(int64_t d, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  Tensor select(int64_t d, int64_t index) const;
  Tensor unsqueeze(int64_t d) const;
  Tensor squeeze(int64_t d) const;
  Tensor expand(const Shape& shape) const;  // broadcast size-1 dims with stride 0
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  // The same data without autograd history (what backward functions save).
  Tensor detach() const;

  // ---- copies (implemented by ops/copy.cpp through each device's kernel) --
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;

  // ---- host access (for tests, printing and small bookkeeping) -----------
  // All elements converted to f32 (copied to the host first if needed).
  std::vector<float> to_floats() const;
  std::vector<int64_t> to_ints() const;
  double item() const;  // a one-element tensor's value
  std::string str(int64_t max_per_dim = 6) const;

  // ---- autograd metadata (the engine in autograd/ gives it meaning) ------
  bool requires_grad() const;
  // Marks a leaf as needing a gradient; returns *this for chaining.
  Tensor& set_requires_grad(bool required);
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  bool is_leaf() const;
  AutogradMeta* autograd_meta() const { return impl_ ? impl_->autograd.get() : nullptr; }
  AutogradMeta& ensure_autograd_meta() const;

  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  TensorImpl& impl() const {
    TITAN_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  TITAN_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: {} values do not fill shape {}",
              values.size(), shape_str(shape));
  Tensor tensor = empty(shape, dtype_of<T>());
  if (!values.empty()) std::memcpy(tensor.data_ptr(), values.data(), values.size() * sizeof(T));
  return tensor;
}

// While one is alive on this thread, reading tensor values on the host
// (item, to_floats, to_ints, a copy from a device to the CPU) is an error
// naming the tensor. The trainer runs each step's device work under one: a
// captured CUDA graph replays device work only, so a host read inside the
// step would silently see stale values; every CPU test run checks this too.
class NoHostReadsScope {
 public:
  explicit NoHostReadsScope(const char* what);
  ~NoHostReadsScope();
  NoHostReadsScope(const NoHostReadsScope&) = delete;
  NoHostReadsScope& operator=(const NoHostReadsScope&) = delete;
  // Throws titan::Error if a scope is active on this thread.
  static void check_host_read(const Tensor& tensor);

 private:
  const char* previous_;
};

// Lifts this thread's NoHostReadsScope while it lives, for the few paths that
// cannot avoid a host read and say so where they use it (a step through them
// cannot be recorded into a graph): the plain per-expert loop of a MoE layer,
// expert parallelism's split sizes.
class AllowHostReadsScope {
 public:
  AllowHostReadsScope();
  ~AllowHostReadsScope();
  AllowHostReadsScope(const AllowHostReadsScope&) = delete;
  AllowHostReadsScope& operator=(const AllowHostReadsScope&) = delete;

 private:
  const char* previous_;
};

}  // namespace titan
