// CPU random fill: each thread takes a range of elements; the value of element
// i depends only on (seed, stream, block, lane) of its index in the whole
// tensor, never on the partitioning.
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
  const RandomSampler sample(spec);
  parallel_for(n, 1 << 12, [&](int64_t begin, int64_t end) {
    // Neighbouring elements mostly share a block: it is drawn once for them.
    uint64_t drawn = ~uint64_t{0};
    Philox4x32 block{};
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t index = whole_index(spec.box, static_cast<uint64_t>(i));
      if (index / 4 != drawn) {
        drawn = index / 4;
        block = random_block(spec, index);
      }
      store_element(base, dtype, i, sample(block, static_cast<int>(index % 4)));
    }
  });
}

}  // namespace

void register_random() { random_kernels.set_kernel(DeviceType::cpu, random_kernel); }

}  // namespace titan::ops::cpu::TITAN_ISA
