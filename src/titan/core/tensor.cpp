#include "titan/core/tensor.h"

#include <algorithm>
#include <sstream>

#include "titan/core/autograd_meta.h"

namespace titan {

int64_t shape_numel(const Shape& shape) {
  int64_t numel = 1;
  for (int64_t size : shape) numel *= size;
  return numel;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

namespace {

std::shared_ptr<TensorImpl> make_impl(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
                                      DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return impl;
}

void check_shape(const Shape& shape) {
  for (int64_t size : shape) TITAN_CHECK(size >= 0, "negative size in shape {}", shape_str(shape));
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  auto storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  StorageWatch::notify(storage);
  return Tensor(make_impl(std::move(storage), shape, contiguous_strides(shape), 0, dtype));
}

Tensor Tensor::unallocated(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  auto storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device,
                                           Storage::Deferred{});
  return Tensor(make_impl(std::move(storage), shape, contiguous_strides(shape), 0, dtype));
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device,
                         std::function<void(void*)> release) {
  check_shape(shape);
  auto storage = std::make_shared<Storage>(data, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device,
                                           std::move(release));
  return Tensor(make_impl(std::move(storage), shape, contiguous_strides(shape), 0, dtype));
}

int64_t Tensor::wrap_dim(int64_t d) const {
  const int64_t rank = dim();
  const int64_t wrapped = d < 0 ? d + rank : d;
  TITAN_CHECK(wrapped >= 0 && wrapped < rank, "dimension {} out of range for a tensor of shape {}", d,
              shape_str(shape()));
  return wrapped;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = impl().shape.size(); i-- > 0;) {
    if (impl().shape[i] == 1) continue;
    if (impl().strides[i] != expected) return false;
    expected *= impl().shape[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  TITAN_CHECK(!device().is_meta(), "data_ptr() of a meta tensor (shape {}): meta tensors hold no data",
              shape_str(shape()));
  TITAN_CHECK(storage()->has_memory(),
              "tensor of shape {} points at released memory (an FSDP-gathered parameter used outside the forward "
              "or backward of its block?)",
              shape_str(shape()));
  return static_cast<char*>(storage()->data()) + impl().offset * static_cast<int64_t>(element_size());
}

Tensor Tensor::view(const Shape& requested) const {
  Shape shape = requested;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TITAN_CHECK(infer < 0, "view: more than one -1 in {}", shape_str(requested));
      infer = static_cast<int>(i);
    } else {
      TITAN_CHECK(shape[i] >= 0, "view: invalid size in {}", shape_str(requested));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    TITAN_CHECK(known > 0 && numel() % known == 0, "view: cannot infer -1 in {} for {} elements", shape_str(requested),
                numel());
    shape[infer] = numel() / known;
  }
  TITAN_CHECK(shape_numel(shape) == numel(), "view: shape {} does not match {} elements of a {} tensor",
              shape_str(shape), numel(), shape_str(this->shape()));
  TITAN_CHECK(is_contiguous(), "view: tensor of shape {} with strides {} is not contiguous (use reshape)",
              shape_str(this->shape()), shape_str(strides()));
  return Tensor(make_impl(storage(), shape, contiguous_strides(shape), impl().offset, dtype()));
}

Tensor Tensor::reshape(const Shape& shape) const { return is_contiguous() ? view(shape) : contiguous().view(shape); }

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> order(static_cast<size_t>(dim()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::swap(order[wrap_dim(d0)], order[wrap_dim(d1)]);
  return permute(order);
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  TITAN_CHECK(static_cast<int64_t>(order.size()) == dim(), "permute: order of {} dims for a {}-d tensor", order.size(),
              dim());
  Shape shape(order.size()), strides(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t source = wrap_dim(order[i]);
    TITAN_CHECK(!seen[source], "permute: dimension {} repeated", source);
    seen[source] = true;
    shape[i] = impl().shape[source];
    strides[i] = impl().strides[source];
  }
  return Tensor(make_impl(storage(), shape, strides, impl().offset, dtype()));
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d);
  const int64_t size = impl().shape[d];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  TITAN_CHECK(step > 0, "slice: step must be positive, got {}", step);
  Shape shape = impl().shape, strides = impl().strides;
  shape[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  return Tensor(make_impl(storage(), shape, strides, impl().offset + start * impl().strides[d], dtype()));
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d);
  TITAN_CHECK(start >= 0 && length >= 0 && start + length <= impl().shape[d],
              "narrow: [{}, {}) out of range for dim {} of shape {}", start, start + length, d, shape_str(shape()));
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d);
  const int64_t size = impl().shape[d];
  if (index < 0) index += size;
  TITAN_CHECK(index >= 0 && index < size, "select: index {} out of range for dim {} of shape {}", index, d,
              shape_str(shape()));
  Shape shape = impl().shape, strides = impl().strides;
  const int64_t offset = impl().offset + index * strides[d];
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return Tensor(make_impl(storage(), shape, strides, offset, dtype()));
}

Tensor Tensor::unsqueeze(int64_t d) const {
  const int64_t rank = dim();
  if (d < 0) d += rank + 1;
  TITAN_CHECK(d >= 0 && d <= rank, "unsqueeze: dimension {} out of range for shape {}", d, shape_str(shape()));
  Shape shape = impl().shape, strides = impl().strides;
  const int64_t stride = d < rank ? strides[d] * shape[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return Tensor(make_impl(storage(), shape, strides, impl().offset, dtype()));
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d);
  TITAN_CHECK(impl().shape[d] == 1, "squeeze: dimension {} of shape {} is not 1", d, shape_str(shape()));
  return select(d, 0);
}

Tensor Tensor::expand(const Shape& target) const {
  TITAN_CHECK(static_cast<int64_t>(target.size()) >= dim(), "expand: {} to fewer dims {}", shape_str(shape()),
              shape_str(target));
  const size_t lead = target.size() - shape().size();
  Shape strides(target.size(), 0);
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) continue;
    const int64_t size = impl().shape[i - lead];
    if (size == target[i]) {
      strides[i] = impl().strides[i - lead];
    } else {
      TITAN_CHECK(size == 1, "expand: cannot expand {} to {}", shape_str(shape()), shape_str(target));
    }
  }
  return Tensor(make_impl(storage(), target, strides, impl().offset, dtype()));
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  TITAN_CHECK(shape.size() == strides.size(), "as_strided: shape {} and strides {} differ in rank", shape_str(shape),
              shape_str(strides));
  int64_t last = offset;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return Tensor(make_impl(storage(), shape, strides, offset, dtype()));
    last += (shape[i] - 1) * strides[i];
  }
  TITAN_CHECK(offset >= 0 && static_cast<size_t>(last + 1) * element_size() <= storage()->nbytes(),
              "as_strided: view of shape {} strides {} offset {} exceeds storage of {} bytes", shape_str(shape),
              shape_str(strides), offset, storage()->nbytes());
  return Tensor(make_impl(storage(), shape, strides, offset, dtype()));
}

Tensor Tensor::detach() const {
  return Tensor(make_impl(storage(), impl().shape, impl().strides, impl().offset, dtype()));
}

// ---- host access -----------------------------------------------------------

namespace {

// Visits every element in row-major order, passing its storage index.
template <typename Visit>
void for_each_index(const Tensor& tensor, Visit&& visit) {
  const int64_t rank = tensor.dim();
  const int64_t total = tensor.numel();
  std::vector<int64_t> counter(static_cast<size_t>(rank), 0);
  int64_t index = 0;
  for (int64_t n = 0; n < total; ++n) {
    visit(index);
    for (int64_t d = rank - 1; d >= 0; --d) {
      index += tensor.stride(d);
      if (++counter[d] < tensor.size(d)) break;
      index -= tensor.stride(d) * tensor.size(d);
      counter[d] = 0;
    }
  }
}

}  // namespace

namespace {
thread_local const char* no_host_reads = nullptr;
}  // namespace

NoHostReadsScope::NoHostReadsScope(const char* what) : previous_(no_host_reads) { no_host_reads = what; }

NoHostReadsScope::~NoHostReadsScope() { no_host_reads = previous_; }

AllowHostReadsScope::AllowHostReadsScope() : previous_(no_host_reads) { no_host_reads = nullptr; }

AllowHostReadsScope::~AllowHostReadsScope() { no_host_reads = previous_; }

void NoHostReadsScope::check_host_read(const Tensor& tensor) {
  TITAN_CHECK(no_host_reads == nullptr,
              "host read of a tensor ({} {} on {}) inside {}, which must run without host reads",
              dtype_name(tensor.dtype()), shape_str(tensor.shape()), tensor.device().str(), no_host_reads);
}

std::vector<float> Tensor::to_floats() const {
  NoHostReadsScope::check_host_read(*this);
  if (!device().is_cpu()) return to(Device::cpu()).to_floats();
  std::vector<float> values;
  values.reserve(static_cast<size_t>(numel()));
  const void* base = static_cast<const char*>(data_ptr());
  for_each_index(*this,
                 [&](int64_t index) { values.push_back(static_cast<float>(load_element(base, dtype(), index))); });
  return values;
}

std::vector<int64_t> Tensor::to_ints() const {
  NoHostReadsScope::check_host_read(*this);
  if (!device().is_cpu()) return to(Device::cpu()).to_ints();
  TITAN_CHECK(dtype() == DType::i32 || dtype() == DType::i64 || dtype() == DType::u8, "to_ints() of a {} tensor",
              dtype_name(dtype()));
  std::vector<int64_t> values;
  values.reserve(static_cast<size_t>(numel()));
  const void* base = data_ptr();
  for_each_index(*this, [&](int64_t index) {
    switch (dtype()) {
      case DType::i32:
        values.push_back(static_cast<const int32_t*>(base)[index]);
        break;
      case DType::i64:
        values.push_back(static_cast<const int64_t*>(base)[index]);
        break;
      default:
        values.push_back(static_cast<const uint8_t*>(base)[index]);
        break;
    }
  });
  return values;
}

double Tensor::item() const {
  TITAN_CHECK(numel() == 1, "item() of a tensor with {} elements (shape {})", numel(), shape_str(shape()));
  if (dtype() == DType::i64 || dtype() == DType::i32) return static_cast<double>(to_ints()[0]);
  return to_floats()[0];
}

std::string Tensor::str(int64_t max_per_dim) const {
  std::ostringstream out;
  out << "Tensor(shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype()) << ", device=" << device().str();
  if (device().is_meta()) {
    out << ")";
    return out.str();
  }
  const std::vector<float> values = to_floats();
  const Shape dims = shape();
  // Prints nested brackets, eliding the middle of long dimensions.
  std::function<void(size_t, int64_t)> print = [&](size_t d, int64_t base) {
    if (d == dims.size()) {
      out << fmt::format("{:.6g}", values[static_cast<size_t>(base)]);
      return;
    }
    const int64_t inner = shape_numel(Shape(dims.begin() + static_cast<int64_t>(d) + 1, dims.end()));
    out << "[";
    for (int64_t i = 0; i < dims[d]; ++i) {
      if (dims[d] > max_per_dim && i == max_per_dim / 2) {
        out << "..., ";
        i = dims[d] - max_per_dim / 2;
      }
      print(d + 1, base + i * inner);
      if (i + 1 < dims[d]) out << ", ";
    }
    out << "]";
  };
  out << ",\n  ";
  print(0, 0);
  out << ")";
  return out.str();
}

// ---- autograd metadata -----------------------------------------------------

bool Tensor::requires_grad() const {
  const AutogradMeta* meta = autograd_meta();
  return meta != nullptr && (meta->requires_grad || meta->grad_fn != nullptr);
}

Tensor& Tensor::set_requires_grad(bool required) {
  if (!required && autograd_meta() == nullptr) return *this;
  AutogradMeta& meta = ensure_autograd_meta();
  TITAN_CHECK(meta.grad_fn == nullptr, "set_requires_grad on a non-leaf tensor (shape {})", shape_str(shape()));
  TITAN_CHECK(!required || is_floating(dtype()), "only floating tensors can require grad (got {})",
              dtype_name(dtype()));
  meta.requires_grad = required;
  return *this;
}

Tensor Tensor::grad() const {
  const AutogradMeta* meta = autograd_meta();
  return meta ? meta->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const { ensure_autograd_meta().grad = grad; }

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  const AutogradMeta* meta = autograd_meta();
  return meta ? meta->grad_fn : none;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

AutogradMeta& Tensor::ensure_autograd_meta() const {
  if (!impl().autograd) impl_->autograd = std::make_shared<AutogradMeta>();
  return *impl_->autograd;
}

}  // namespace titan
