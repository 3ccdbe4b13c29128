// CPU random fill: each thread takes a range of Philox blocks; the value of
// element i depends only on (seed, block, lane), never on the partitioning.
#include "titan/ops/random.h"
#include "titan/core/copy.h"

// Last, in its own block: it switches on the ISA for everything after it.
#include "titan/ops/cpu/kernels/vec.h"

namespace titan::ops::cpu::TITAN_ISA {
namespace {

void random_kernel(const Tensor& tensor, const RandomSpec& spec) {
  const int64_t n = tensor.numel();
  const DType dtype = tensor.dtype();
  void* base = tensor.data_ptr();
  parallel_for(n, 1 << 12, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      store_element(base, dtype, i, random_value(spec, static_cast<uint64_t>(i)));
    }
  });
}

}  // namespace

void register_random() { random_kernels.set_kernel(DeviceType::cpu, random_kernel); }

}  // namespace titan::ops::cpu::TITAN_ISA
