#include "titan/ops/causal_conv1d.h"

#include <cmath>
#include <vector>

#include "titan/ops/checks.h"

namespace titan::ops {
namespace causal_conv1d_host {

struct Problem {
  int64_t batch = 0, tokens = 0, channels = 0, width = 0;
  std::vector<float> x, weight;
  std::vector<int64_t> documents;  // empty: one document per row
};

// A tensor's values as f32 on the host. On the CPU this reads the storage
// directly (no host read in the trainer's sense: nothing waits on a device);
// elsewhere the values are copied over, which no CUDA graph can record: these
// ops have no device kernels yet, so a step through them is not captured.
std::vector<float> host_floats(const Tensor& t) {
  Tensor cpu;
  if (t.device().is_cpu()) {
    cpu = t.to(DType::f32).contiguous();
  } else {
    const AllowHostReadsScope allow;
    cpu = t.to(Device::cpu()).to(DType::f32).contiguous();
  }
  const float* data = cpu.data<float>();
  return std::vector<float>(data, data + cpu.numel());
}

std::vector<int64_t> host_ints(const Tensor& t) {
  Tensor cpu;
  if (t.device().is_cpu()) {
    cpu = t.contiguous();
  } else {
    const AllowHostReadsScope allow;
    cpu = t.to(Device::cpu()).contiguous();
  }
  if (cpu.dtype() == DType::i32) {
    const int32_t* data = cpu.data<int32_t>();
    return std::vector<int64_t>(data, data + cpu.numel());
  }
  TITAN_CHECK(cpu.dtype() == DType::i64, "causal_conv1d_silu: document_ids must be i32 or i64, got {}",
              dtype_name(cpu.dtype()));
  const int64_t* data = cpu.data<int64_t>();
  return std::vector<int64_t>(data, data + cpu.numel());
}

Problem read(const char* op, const Tensor& x, const Tensor& weight, const Tensor& document_ids) {
  check_defined(op, x, "x");
  check_defined(op, weight, "weight");
  check_rank(op, x, 3, "x [B, T, C]");
  check_rank(op, weight, 2, "weight [C, K]");
  TITAN_CHECK(weight.size(0) == x.size(2) && weight.size(1) > 0, "{}: weight is {}, expected [C, K] with C = {}", op,
              shape_str(weight.shape()), x.size(2));
  Problem p;
  p.batch = x.size(0);
  p.tokens = x.size(1);
  p.channels = x.size(2);
  p.width = weight.size(1);
  p.x = host_floats(x);
  p.weight = host_floats(weight);
  if (document_ids.defined()) {
    TITAN_CHECK(document_ids.shape() == (Shape{p.batch, p.tokens}), "{}: document_ids is {}, expected [B, T]", op,
                shape_str(document_ids.shape()));
    p.documents = host_ints(document_ids);
  }
  return p;
}

// Whether source token s feeds token t of row b (same document).
bool same_document(const Problem& p, int64_t b, int64_t s, int64_t t) {
  return p.documents.empty() || p.documents[b * p.tokens + s] == p.documents[b * p.tokens + t];
}

double pre_activation(const Problem& p, int64_t b, int64_t t, int64_t c) {
  double sum = 0.0;
  for (int64_t j = 0; j < p.width; ++j) {
    const int64_t s = t - (p.width - 1) + j;
    if (s < 0 || !same_document(p, b, s, t)) continue;
    sum += static_cast<double>(p.weight[c * p.width + j]) * p.x[(b * p.tokens + s) * p.channels + c];
  }
  return sum;
}

Tensor on_device_like(const std::vector<float>& values, const Shape& shape, const Tensor& like) {
  return Tensor::from_floats(values, shape).to(like.dtype()).to(like.device());
}

}  // namespace causal_conv1d_host

Tensor causal_conv1d_silu(const Tensor& x, const Tensor& weight, const Tensor& document_ids) {
  using namespace causal_conv1d_host;
  const Problem p = read("causal_conv1d_silu", x, weight, document_ids);
  std::vector<float> y(p.x.size());
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.tokens; ++t) {
      for (int64_t c = 0; c < p.channels; ++c) {
        const double u = pre_activation(p, b, t, c);
        y[(b * p.tokens + t) * p.channels + c] = static_cast<float>(u / (1.0 + std::exp(-u)));
      }
    }
  }
  return on_device_like(y, x.shape(), x);
}

std::pair<Tensor, Tensor> causal_conv1d_silu_backward(const Tensor& grad_y, const Tensor& x, const Tensor& weight,
                                                      const Tensor& document_ids) {
  using namespace causal_conv1d_host;
  const Problem p = read("causal_conv1d_silu_backward", x, weight, document_ids);
  TITAN_CHECK(grad_y.shape() == x.shape(), "causal_conv1d_silu_backward: grad_y is {}, expected {}",
              shape_str(grad_y.shape()), shape_str(x.shape()));
  const std::vector<float> dy = host_floats(grad_y);
  std::vector<double> dx(p.x.size(), 0.0), dw(p.weight.size(), 0.0);
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t t = 0; t < p.tokens; ++t) {
      for (int64_t c = 0; c < p.channels; ++c) {
        const double u = pre_activation(p, b, t, c), s = 1.0 / (1.0 + std::exp(-u));
        const double du = dy[(b * p.tokens + t) * p.channels + c] * s * (1.0 + u * (1.0 - s));
        for (int64_t j = 0; j < p.width; ++j) {
          const int64_t src = t - (p.width - 1) + j;
          if (src < 0 || !same_document(p, b, src, t)) continue;
          const int64_t xi = (b * p.tokens + src) * p.channels + c;
          dx[xi] += du * p.weight[c * p.width + j];
          dw[c * p.width + j] += du * p.x[xi];
        }
      }
    }
  }
  return {on_device_like(std::vector<float>(dx.begin(), dx.end()), x.shape(), x),
          on_device_like(std::vector<float>(dw.begin(), dw.end()), weight.shape(), weight)};
}

}  // namespace titan::ops
