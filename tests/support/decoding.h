// Checks every family's decoding path shares: the logits of a sequence fed
// through the model's cache (a prefill, then one token at a time) against the
// full forward, and greedy generation against the full forward's argmax.
#pragma once

#include <cstdint>
#include <vector>

#include "titan/models/decoder.h"

namespace titan::testing {

// The logits [1, S, vocab] of ids [1, S] decoded through a fresh f32 cache:
// the first `prefill` tokens in one call, then one token per call.
Tensor cached_logits(const models::Decoder& model, const Tensor& ids, int64_t prefill);

// Generates `new_tokens` greedily after `prompt` and expects each to be the
// argmax of the full forward's logits at its position.
void expect_greedy_is_full_forward_argmax(const models::Decoder& model, const std::vector<int64_t>& prompt,
                                          int64_t new_tokens);

}  // namespace titan::testing
