// The training data loader: packed rows of one dataset, shuffled by seed,
// sharded by data-parallel rank, produced ahead by a prefetch thread, with a
// state_dict that makes a resumed run see exactly the batches it would have.
//
// Rows form one global stream. Global batch k is rows [k G, (k+1) G) with
// G = local_batch * dp_world; rank r takes rows [k G + r B, k G + (r+1) B).
// So ranks see disjoint rows whose union is what one rank with batch G sees,
// and the loader state (a cursor into the global stream) is the same on every
// rank and survives a change of world size.
#pragma once

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "titan/core/tensor.h"
#include "titan/data/packed_stream.h"
#include "titan/data/token_corpus.h"

namespace titan::data {

struct DataLoaderConfig {
  std::vector<std::string> paths;  // shard folders / manifest.json / *.tshard, or raw text, JSONL, fortune files
  std::string tokenizer;           // needed for raw inputs and bare shards
  CorpusOptions corpus;            // how raw inputs are read
  int64_t seq_len = 2048;
  int64_t local_batch = 8;  // rows per rank per step
  uint64_t seed = 0;        // document order
  int64_t dp_rank = 0, dp_world = 1;
  double validation_fraction = 0.0;  // share of documents held out (chosen by a fixed hash of the index)
  bool document_masking = false;     // labels at document ends become -100 (see packed_stream.h)
  bool whole_documents = false;      // rows hold whole documents only (see packed_stream.h)
  bool add_bos = true, add_eos = true;
  // Set: chat data for supervised fine-tuning (chat_dataset.h). Raw inputs are
  // chat JSONL(.zst) rendered with the template, or shards must be chat
  // shards; documents pack whole; labels count only trained tokens; the
  // template writes BOS and end-of-turn tokens, so add_bos/add_eos are
  // ignored. chat->max_tokens 0 means seq_len.
  std::optional<ChatOptions> chat;
  int prefetch = 2;  // batches produced ahead by a background thread; 0: on demand
  int threads = 0;   // for tokenizing raw inputs
};

// One rank's batch: [local_batch, seq_len] i64 tensors on the CPU.
struct Batch {
  Tensor input_ids, labels, positions, document_ids;
  int64_t step = 0;          // global batch index
  int64_t real_tokens = 0;   // non-padding tokens (only validation pads)
  int64_t label_tokens = 0;  // labels that count (not -100): the weight of this batch's mean loss
};

class ValidationIterator;

class DataLoader {
 public:
  explicit DataLoader(DataLoaderConfig config);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  Batch next_batch();

  // The position after the last batch next_batch() returned (not after the
  // prefetched ones), as JSON; load_state_dict resumes there.
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);

  // A fresh pass over the held-out documents, in order, sharded like training.
  ValidationIterator validation() const;

  const DataLoaderConfig& config() const { return config_; }
  uint32_t vocab_size() const { return corpus_->vocab_size(); }
  const TokenCorpus& corpus() const { return *corpus_; }
  uint64_t num_train_documents() const { return train_documents_.size(); }
  uint64_t num_validation_documents() const { return validation_documents_.size(); }
  const std::vector<uint64_t>& validation_documents() const { return validation_documents_; }

 private:
  struct Produced {
    Batch batch;
    PackedStream::Cursor cursor_after;
  };
  Produced produce(PackedStream& stream, int64_t step) const;
  void start_prefetch();
  void stop_prefetch();
  void prefetch_loop();

  DataLoaderConfig config_;
  std::shared_ptr<const TokenCorpus> corpus_;
  std::vector<uint64_t> train_documents_, validation_documents_;
  std::unique_ptr<PackedStream> stream_;
  // State of what the caller has consumed.
  PackedStream::Cursor consumed_cursor_;
  int64_t consumed_step_ = 0;
  // Prefetch thread and its queue.
  std::thread worker_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Produced> queue_;
  bool stop_ = false;
  std::exception_ptr error_;
  int64_t produce_step_ = 0;
};

class ValidationIterator {
 public:
  // Fills `batch` and returns true, or false when the pass is over. Every rank
  // gets the same number of batches; rows past the data are padding (labels -100).
  bool next(Batch& batch);
  int64_t num_batches() const { return num_batches_; }

 private:
  friend class DataLoader;
  ValidationIterator(const DataLoaderConfig& config, std::unique_ptr<PackedStream> stream);
  DataLoaderConfig config_;
  std::unique_ptr<PackedStream> stream_;
  int64_t num_batches_ = 0, step_ = 0;
};

}  // namespace titan::data
