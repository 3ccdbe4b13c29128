// Random token batches, for throughput benchmarks and tests: what the tokens
// say does not change the work a step does.
#pragma once

#include <cstdint>

#include "titan/train/trainer.h"

namespace titan::train {

// Batches of `batch` sequences of `seq_len` ids uniform in [0, vocab), labels
// shifted by one, from a Philox stream seeded by `seed` (the same batches on
// every run and machine).
BatchSource random_token_batches(int64_t batch, int64_t seq_len, int64_t vocab, uint64_t seed);

}  // namespace titan::train
