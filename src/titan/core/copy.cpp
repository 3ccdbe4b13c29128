// Entry points for copies and fills, and the Tensor methods built on them.
#include "titan/core/copy.h"

#include "titan/core/trace_context.h"

namespace titan {

void copy_(const Tensor& dst, const Tensor& src) {
  const trace::OpScope op_scope("copy_");
  TITAN_CHECK(dst.defined(), "copy: destination is an undefined tensor");
  TITAN_CHECK(src.defined(), "copy: source is an undefined tensor");
  TITAN_CHECK(dst.shape() == src.shape(), "copy: shape mismatch {} vs {}", shape_str(dst.shape()),
              shape_str(src.shape()));
  if (dst.device() == src.device()) {
    if (dst.device().is_meta()) return;
    copy_kernels(dst.device(), dst, src);
    return;
  }
  TITAN_CHECK(!dst.device().is_meta() && !src.device().is_meta(), "copy: between {} and {} (meta holds no data)",
              src.device().str(), dst.device().str());
  if (dst.device().is_cpu()) NoHostReadsScope::check_host_read(src);
  // Cross-device: move contiguous bytes in the source dtype, then convert on the destination.
  const Device remote = dst.device().is_cpu() ? src.device() : dst.device();
  if (dst.is_contiguous() && dst.dtype() == src.dtype()) {
    transfer_kernels(remote, dst, src.contiguous());
    return;
  }
  Tensor staged = Tensor::empty(src.shape(), src.dtype(), dst.device());
  transfer_kernels(remote, staged, src.contiguous());
  copy_kernels(dst.device(), dst, staged);
}

void synchronize(Device device) {
  if (device.is_cpu() || device.is_meta()) return;
  synchronize_kernels(device);
}

void fill_(const Tensor& dst, double value) {
  TITAN_CHECK(dst.defined(), "fill: destination is an undefined tensor");
  if (dst.device().is_meta()) return;
  fill_kernels(dst.device(), dst, value);
}

Tensor cast(const Tensor& src, DType dtype) {
  const trace::OpScope op_scope("cast");
  if (src.dtype() == dtype) return src;
  Tensor out = Tensor::empty(src.shape(), dtype, src.device());
  copy_(out, src);
  return out;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor tensor = empty(shape, dtype, device);
  fill_(tensor, value);
  return tensor;
}

Tensor Tensor::from_floats(std::span<const float> values, const Shape& shape, DType dtype) {
  TITAN_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_floats: {} values do not fill shape {}",
              values.size(), shape_str(shape));
  Tensor staged = from_blob(const_cast<float*>(values.data()), shape, DType::f32, Device::cpu());
  Tensor tensor = empty(shape, dtype);
  copy_(tensor, staged);
  return tensor;
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  std::vector<int64_t> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = i;
  return cast(from_vector(values, {n}), dtype).contiguous();
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = empty(shape(), dtype(), device());
  copy_(out, *this);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  copy_(out, *this);
  return out;
}

Tensor Tensor::to(DType dtype) const { return cast(*this, dtype); }

Tensor Tensor::to(Device device) const {
  if (this->device() == device) return *this;
  Tensor out = empty(shape(), dtype(), device);
  copy_(out, *this);
  return out;
}

}  // namespace titan
