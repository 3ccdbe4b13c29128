// Checks the families' tests share: a model against its float64 reference
// case (logits, loss, every gradient), the logits of a sequence fed through
// the model's cache (a prefill, then one token at a time) against the full
// forward, and greedy generation against the full forward's argmax.
#pragma once

#include <cstdint>
#include <vector>

#include "support/reference.h"
#include "titan/models/decoder.h"

namespace titan::testing {

// Copies each of the module's parameters from the case's "param.<name>",
// expecting the two sets of names to be the same (a test failure names a
// parameter the case lacks, and counts a difference the other way).
void load_reference_parameters(nn::Module& module, const ReferenceCase& ref);

// The model's f32 logits, loss and every parameter's gradient on `inputs`
// against the case's float64 "logits", "loss" and "grad.<name>": the op-level
// f32 tolerance of each tensor's scale for the logits (a few blocks of f32
// arithmetic), 1e-5 relative for the loss, and 5x the op-level tolerance for
// the gradients (every layer's backward), as model_parity_test.
void expect_f32_parity_with_reference(models::Decoder& model, const ReferenceCase& ref,
                                      const models::DecoderInputs& inputs);

// The logits [1, S, vocab] of ids [1, S] decoded through a fresh f32 cache:
// the first `prefill` tokens in one call, then one token per call.
Tensor cached_logits(const models::Decoder& model, const Tensor& ids, int64_t prefill);

// Generates `new_tokens` greedily after `prompt` and expects each to be the
// argmax of the full forward's logits at its position.
void expect_greedy_is_full_forward_argmax(const models::Decoder& model, const std::vector<int64_t>& prompt,
                                          int64_t new_tokens);

// Trains `model` for the steps of a tests/reference/training_run.py case from
// its initial weights (and correction biases), on its batches, as the
// reference does (AdamW 0.9 / 0.95 / 1e-8 with the case's weight decay except
// for norms and embeddings, warmup then linear decay, clipping), and expects
// each step's loss within `loss_rtol` and gradient norm within `norm_rtol` of
// the float64 run, and each final weight within `weight_rtol` (relative L2).
// Returns the worst relative errors seen (loss, gradient norm, final weight),
// for the tests' comments.
struct TrainingDrift {
  double loss = 0.0, grad_norm = 0.0, weight = 0.0;
};
TrainingDrift expect_training_tracks_reference(models::Decoder& model, const ReferenceCase& ref, double loss_rtol,
                                               double norm_rtol, double weight_rtol);

}  // namespace titan::testing
