// Micro-batches from whole batches, for the train tests that compare gradient
// accumulation against one large batch.
#pragma once

#include <cstdint>

#include "titan/train/trainer.h"

namespace titan::train::testing {

// Each batch of `source` as `parts` micro-batches of its rows, in row order
// (input ids and labels only).
BatchSource split_batches(BatchSource source, int64_t parts);

}  // namespace titan::train::testing
