// Under context parallelism every rank of a cp group loads the same batch and
// keeps its slice of each sequence (distributed/context_parallel.h): its
// chunks of the tokens, labels, document ids and positions. Positions stay
// global (RoPE rotates by where a token sits in the whole sequence), so they
// are made explicit here when the loader's would not be used.
#pragma once

#include "titan/data/data_loader.h"
#include "titan/distributed/context_parallel.h"

namespace titan::train {

// `batch` cut to `rank`'s chunks; label_tokens counts this slice's labels.
// With `document_positions` the loader's positions (per document) are kept,
// otherwise they become 0..S-1 before the cut.
data::Batch context_shard(const data::Batch& batch, const distributed::SequenceLayout& layout, int64_t rank,
                          bool document_positions);

// What a rank's mean loss over `slice` is multiplied by so that the mean over
// the `ranks` slices weighs every counted label of `whole` alike:
// ranks x labels in the slice / labels in the whole (1 when nothing counts).
float context_loss_weight(const data::Batch& whole, const data::Batch& slice, int64_t ranks);

}  // namespace titan::train
