#include "train/batch_split.h"

#include <memory>
#include <vector>

namespace titan::train::testing {

BatchSource split_batches(BatchSource source, int64_t parts) {
  // Parts pushed last to first, so pop_back hands them out in row order.
  auto pending = std::make_shared<std::vector<data::Batch>>();
  return [=] {
    if (pending->empty()) {
      const data::Batch whole = source();
      const int64_t rows = whole.input_ids.size(0) / parts;
      for (int64_t p = parts - 1; p >= 0; --p) {
        data::Batch part;
        part.input_ids = whole.input_ids.narrow(0, p * rows, rows).contiguous();
        part.labels = whole.labels.narrow(0, p * rows, rows).contiguous();
        pending->push_back(part);
      }
    }
    data::Batch next = pending->back();
    pending->pop_back();
    return next;
  };
}

}  // namespace titan::train::testing
