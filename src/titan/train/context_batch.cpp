#include "titan/train/context_batch.h"

#include <vector>

#include "titan/data/packed_stream.h"

namespace titan::train {

data::Batch context_shard(const data::Batch& batch, const parallel::SequenceLayout& layout, int64_t rank,
                          bool document_positions) {
  data::Batch local = batch;
  local.input_ids = parallel::shard_sequence(batch.input_ids, layout, rank);
  local.labels = parallel::shard_sequence(batch.labels, layout, rank);
  local.document_ids = parallel::shard_sequence(batch.document_ids, layout, rank);
  Tensor positions = batch.positions;
  if (!document_positions || !positions.defined()) {
    const int64_t rows = batch.input_ids.size(0), len = batch.input_ids.size(1);
    std::vector<int64_t> counting(static_cast<size_t>(rows * len));
    for (int64_t i = 0; i < rows * len; ++i) counting[static_cast<size_t>(i)] = i % len;
    positions = Tensor::from_vector(counting, {rows, len});
  }
  local.positions = parallel::shard_sequence(positions, layout, rank);
  local.label_tokens = 0;
  for (int64_t label : local.labels.to_ints()) local.label_tokens += label != data::kIgnoreIndex ? 1 : 0;
  return local;
}

}  // namespace titan::train
