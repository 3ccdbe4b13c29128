// One depth of DeepSeek-V3's multi-token prediction (TorchTitan's
// MTPTransformerBlock): an ordinary decoder block whose input fuses the
// previous depth's hidden states with the embeddings of the tokens `depth`
// places ahead, and whose output is normed for the shared output projection:
//   h   = eh_proj([enorm(embedding); hnorm(previous * valid)])
//   out = mtp_norm(block(h))
// `valid` zeroes the previous hidden state where the shifted token does not
// exist (past the sequence end, across a packed document boundary), as
// TorchTitan does. The block's own parameters keep the ordinary block's names
// (attention.*, moe.* / feed_forward.*, attention_norm, ffn_norm), so the
// tensor-parallel, expert-parallel and FSDP plans and the Hugging Face names
// of a decoder layer apply to it unchanged.
#pragma once

#include <memory>

#include "titan/nn/linear.h"
#include "titan/nn/rms_norm.h"
#include "titan/nn/transformer_block.h"

namespace titan::nn {

class MtpBlock : public TransformerBlock {
 public:
  MtpBlock(const TransformerBlockConfig& config, Device device);
  // embedding: the shifted tokens' embeddings [B, S, dim]; previous: the last
  // main layer's output (depth 1) or the previous depth's output [B, S, dim];
  // valid: [B, S, 1] of 1 where the shifted token exists, 0 elsewhere, in the
  // activations' dtype. Runs through the block's runner (FSDP gathers every
  // parameter of the depth, activation checkpointing recomputes all of it).
  Tensor forward(const Tensor& embedding, const Tensor& previous, const Tensor& valid, const BlockInputs& inputs) const;
  // The block's rules (TransformerBlock::set_init), the norms at one, eh_proj N(0, 0.02) cut at +-2.
  void set_init(double output_std);

  std::shared_ptr<RMSNorm> enorm, hnorm, mtp_norm;
  std::shared_ptr<Linear> eh_proj;  // [dim, 2 dim]: columns [0, dim) read the embedding, [dim, 2 dim) the hidden state
};

}  // namespace titan::nn
