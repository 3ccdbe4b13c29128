#include "titan/train/random_batches.h"

#include <memory>
#include <vector>

#include "titan/ops/random.h"

namespace titan::train {

BatchSource random_token_batches(int64_t batch_size, int64_t seq_len, int64_t vocab, uint64_t seed) {
  auto generator = std::make_shared<Generator>(seed);
  return [=] {
    Tensor values = Tensor::empty({batch_size, seq_len + 1});
    ops::uniform_(values, 0.0, static_cast<double>(vocab), *generator);
    std::vector<int64_t> ids;
    for (float v : values.to_floats()) ids.push_back(static_cast<int64_t>(v));
    const Tensor all = Tensor::from_vector(ids, {batch_size, seq_len + 1});
    data::Batch batch;
    batch.input_ids = all.narrow(1, 0, seq_len).contiguous();
    batch.labels = all.narrow(1, 1, seq_len).contiguous();
    return batch;
  };
}

}  // namespace titan::train
