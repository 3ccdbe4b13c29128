// Under context parallelism every rank of a cp group loads the same batch and
// keeps its slice of each sequence (parallel/context_parallel.h): its
// chunks of the tokens, labels, document ids and positions. Positions stay
// global (RoPE rotates by where a token sits in the whole sequence), so they
// are made explicit here when the loader's would not be used.
#pragma once

#include "titan/data/data_loader.h"
#include "titan/parallel/context_parallel.h"

namespace titan::train {

// `batch` cut to `rank`'s chunks; label_tokens counts this slice's labels.
// With `document_positions` the loader's positions (per document) are kept,
// otherwise they become 0..S-1 before the cut.
data::Batch context_shard(const data::Batch& batch, const parallel::SequenceLayout& layout, int64_t rank,
                          bool document_positions);

// (Each slice's loss is weighed by its own counted labels over the global
// batch's, with every other rank's: Trainer::token_loss_scales.)

}  // namespace titan::train
