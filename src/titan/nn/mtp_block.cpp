#include "titan/nn/mtp_block.h"

#include "titan/nn/functional.h"

namespace titan::nn {

MtpBlock::MtpBlock(const TransformerBlockConfig& config, Device device) : TransformerBlock(config, device) {
  const int64_t dim = config.attention.dim;
  const RMSNormConfig norm{dim, config.norm_eps, config.norm_weight_offset};
  enorm = register_module("enorm", norm.build(device));
  hnorm = register_module("hnorm", norm.build(device));
  eh_proj = register_module("eh_proj", LinearConfig{2 * dim, dim}.build(device));
  mtp_norm = register_module("mtp_norm", norm.build(device));
}

Tensor MtpBlock::forward(const Tensor& embedding, const Tensor& previous, const Tensor& valid,
                         const BlockInputs& inputs) const {
  const ForwardScope scope(*this);
  const int64_t dim = config.attention.dim;
  // The runner takes one input, which activation checkpointing keeps and
  // FSDP tracks: both branches travel as one [B, S, 2 dim] tensor.
  const Tensor packed = F::concat(embedding, F::mul(previous, F::contiguous(F::expand(valid, previous.shape()))), -1);
  const auto body = [this, inputs, dim](const Tensor& in) {
    const Tensor fused = F::concat(enorm->forward(F::contiguous(F::narrow(in, -1, 0, dim))),
                                   hnorm->forward(F::contiguous(F::narrow(in, -1, dim, dim))), -1);
    return mtp_norm->forward(compute(eh_proj->forward(fused), inputs));
  };
  return runner() ? runner()(body, packed) : body(packed);
}

void MtpBlock::set_init(double output_std) {
  TransformerBlock::set_init(output_std);
  eh_proj->set_init(0.02);
}

}  // namespace titan::nn
