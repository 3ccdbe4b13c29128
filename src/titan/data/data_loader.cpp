#include "titan/data/data_loader.h"

#include <algorithm>

#include "titan/core/error.h"
#include "titan/data/hashing.h"

namespace titan::data {
namespace {

constexpr uint64_t kSplitSalt = 0x76616C6964617465ull;

// A fixed hash of the document index decides the split, so the held-out set
// never depends on the seed, the world size or the order of training.
double split_score(uint64_t index) { return static_cast<double>(hash_mix(index ^ kSplitSalt) >> 11) * 0x1.0p-53; }

PackedStream::Options stream_options(const DataLoaderConfig& config, const TokenCorpus& corpus, bool training) {
  PackedStream::Options options;
  if (config.add_bos) {
    TITAN_CHECK(corpus.bos_id().has_value(), "data loader: add_bos is set but the tokenizer has no BOS token");
    options.bos = corpus.bos_id();
  }
  if (config.add_eos) {
    TITAN_CHECK(corpus.eos_id().has_value(), "data loader: add_eos is set but the tokenizer has no EOS token");
    options.eos = corpus.eos_id();
  }
  options.shuffle = training;
  options.repeat = training;
  options.seed = config.seed;
  options.document_masking = config.document_masking;
  options.whole_documents = config.whole_documents;
  options.pad_id = corpus.eos_id().value_or(0);
  return options;
}

Batch empty_batch(int64_t rows, int64_t seq_len) {
  Batch batch;
  batch.input_ids = Tensor::empty({rows, seq_len}, DType::i64);
  batch.labels = Tensor::empty({rows, seq_len}, DType::i64);
  batch.positions = Tensor::empty({rows, seq_len}, DType::i64);
  batch.document_ids = Tensor::empty({rows, seq_len}, DType::i64);
  return batch;
}

// This rank's rows of one global batch (see data_loader.h).
void fill_rank_rows(const DataLoaderConfig& config, PackedStream& stream, Batch& batch) {
  const int64_t b = config.local_batch, s = config.seq_len;
  int64_t* inputs = batch.input_ids.data<int64_t>();
  int64_t* labels = batch.labels.data<int64_t>();
  int64_t* positions = batch.positions.data<int64_t>();
  int64_t* documents = batch.document_ids.data<int64_t>();
  stream.skip_rows(static_cast<uint64_t>(config.dp_rank * b), s);
  batch.real_tokens = 0;
  for (int64_t row = 0; row < b; ++row) {
    batch.real_tokens +=
        stream.next_row(s, inputs + row * s, labels + row * s, positions + row * s, documents + row * s);
  }
  stream.skip_rows(static_cast<uint64_t>((config.dp_world - config.dp_rank - 1) * b), s);
  batch.label_tokens = 0;
  for (int64_t i = 0; i < b * s; ++i) batch.label_tokens += labels[i] != kIgnoreIndex;
}

}  // namespace

DataLoader::DataLoader(DataLoaderConfig config) : config_(std::move(config)) {
  TITAN_CHECK(config_.seq_len > 0, "data loader: seq_len must be positive, got {}", config_.seq_len);
  TITAN_CHECK(config_.local_batch > 0, "data loader: local_batch must be positive, got {}", config_.local_batch);
  TITAN_CHECK(config_.dp_world >= 1 && config_.dp_rank >= 0 && config_.dp_rank < config_.dp_world,
              "data loader: dp rank {} is outside world size {}", config_.dp_rank, config_.dp_world);
  TITAN_CHECK(config_.validation_fraction >= 0 && config_.validation_fraction < 1,
              "data loader: validation_fraction must be in [0, 1), got {}", config_.validation_fraction);
  TITAN_CHECK(config_.prefetch >= 0, "data loader: prefetch must be >= 0");
  if (config_.chat) {
    // The chat template writes BOS and each turn's end itself; conversations
    // pack whole and never longer than a row.
    config_.add_bos = config_.add_eos = false;
    config_.whole_documents = true;
    if (config_.chat->max_tokens == 0) config_.chat->max_tokens = static_cast<uint64_t>(config_.seq_len);
  }
  TokenCorpus::Options corpus_options;
  corpus_options.corpus = config_.corpus;
  corpus_options.tokenizer = config_.tokenizer;
  corpus_options.threads = config_.threads;
  corpus_options.chat = config_.chat;
  corpus_ = std::make_shared<const TokenCorpus>(config_.paths, corpus_options);

  for (uint64_t d = 0; d < corpus_->num_documents(); ++d) {
    (split_score(d) < config_.validation_fraction ? validation_documents_ : train_documents_).push_back(d);
  }
  // A small corpus may draw no held-out document at all: hold out the one
  // with the lowest score, so asking for a validation split always gives one.
  if (config_.validation_fraction > 0 && validation_documents_.empty() && train_documents_.size() >= 2) {
    const auto lowest = std::min_element(train_documents_.begin(), train_documents_.end(),
                                         [](uint64_t a, uint64_t b) { return split_score(a) < split_score(b); });
    validation_documents_.push_back(*lowest);
    train_documents_.erase(lowest);
  }
  TITAN_CHECK(!train_documents_.empty(), "data loader: no training documents left after the validation split");
  stream_ = std::make_unique<PackedStream>(corpus_, train_documents_, stream_options(config_, *corpus_, true));
  consumed_cursor_ = stream_->cursor();
  produce_step_ = consumed_step_;
}

DataLoader::~DataLoader() { stop_prefetch(); }

DataLoader::Produced DataLoader::produce(PackedStream& stream, int64_t step) const {
  Produced produced;
  produced.batch = empty_batch(config_.local_batch, config_.seq_len);
  fill_rank_rows(config_, stream, produced.batch);
  produced.batch.step = step;
  produced.cursor_after = stream.cursor();
  return produced;
}

// The thread starts with the first batch asked for, not with the loader: a
// job that is refused before training (its memory check, say) never builds one.
void DataLoader::start_prefetch() {
  if (config_.prefetch == 0 || worker_.joinable()) return;
  produce_step_ = consumed_step_;
  stop_ = false;
  worker_ = std::thread([this] { prefetch_loop(); });
}

void DataLoader::stop_prefetch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
  queue_.clear();
  error_ = nullptr;
}

void DataLoader::prefetch_loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || static_cast<int>(queue_.size()) < config_.prefetch; });
      if (stop_) return;
    }
    try {
      Produced produced = produce(*stream_, produce_step_++);
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(produced));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    changed_.notify_all();
  }
}

Batch DataLoader::next_batch() {
  Produced produced;
  if (config_.prefetch == 0) {
    produced = produce(*stream_, produce_step_++);
  } else {
    start_prefetch();
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !queue_.empty() || error_ != nullptr; });
    if (queue_.empty()) std::rethrow_exception(error_);
    produced = std::move(queue_.front());
    queue_.pop_front();
    changed_.notify_all();
  }
  consumed_cursor_ = produced.cursor_after;
  consumed_step_ = produced.batch.step + 1;
  return std::move(produced.batch);
}

nlohmann::json DataLoader::state_dict() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {{"version", 1},
          {"step", consumed_step_},
          {"epoch", consumed_cursor_.epoch},
          {"position", consumed_cursor_.position},
          {"offset", consumed_cursor_.offset},
          {"seed", config_.seed},
          {"train_documents", train_documents_.size()},
          {"validation_documents", validation_documents_.size()},
          {"add_bos", config_.add_bos},
          {"add_eos", config_.add_eos},
          {"whole_documents", config_.whole_documents}};
}

void DataLoader::load_state_dict(const nlohmann::json& state) {
  auto field = [&](const char* key) -> const nlohmann::json& {
    TITAN_CHECK(state.is_object() && state.contains(key), "data loader state: missing \"{}\"", key);
    return state[key];
  };
  auto number = [&](const char* key) -> uint64_t {
    const nlohmann::json& value = field(key);
    if (value.is_number_unsigned()) return value.get<uint64_t>();
    TITAN_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0,
                "data loader state: \"{}\" must be a non-negative integer", key);
    return static_cast<uint64_t>(value.get<int64_t>());
  };
  auto same = [&](const char* key, const nlohmann::json& now) {
    TITAN_CHECK(field(key) == now,
                "data loader state: it was saved with {} = {}, but this loader has {} (a different dataset or config)",
                key, field(key).dump(), now.dump());
  };
  TITAN_CHECK(number("version") == 1, "data loader state: unsupported version {}", field("version").dump());
  same("seed", config_.seed);
  // The split of documents into training and validation ones follows validation_fraction.
  if (field("train_documents") != train_documents_.size() ||
      field("validation_documents") != validation_documents_.size()) {
    fail(
        "data loader state: it was saved with {} training and {} validation documents, but this loader has {} and {} "
        "(validation fraction {}): a different dataset, or another validation split",
        field("train_documents").dump(), field("validation_documents").dump(), train_documents_.size(),
        validation_documents_.size(), config_.validation_fraction);
  }
  same("add_bos", config_.add_bos);
  same("add_eos", config_.add_eos);
  // Absent from states saved before whole-document packing existed: those packed across documents.
  if (state.contains("whole_documents")) same("whole_documents", config_.whole_documents);
  const PackedStream::Cursor cursor{number("epoch"), number("position"), number("offset")};
  const auto step = static_cast<int64_t>(number("step"));
  stop_prefetch();
  stream_->set_cursor(cursor);
  consumed_cursor_ = cursor;
  consumed_step_ = step;
  produce_step_ = step;
}

ValidationIterator DataLoader::validation() const {
  auto stream =
      std::make_unique<PackedStream>(corpus_, validation_documents_, stream_options(config_, *corpus_, false));
  return ValidationIterator(config_, std::move(stream));
}

ValidationIterator::ValidationIterator(const DataLoaderConfig& config, std::unique_ptr<PackedStream> stream)
    : config_(config), stream_(std::move(stream)) {
  const uint64_t rows = stream_->rows_left(config_.seq_len);
  const auto global = static_cast<uint64_t>(config_.local_batch * config_.dp_world);
  num_batches_ = static_cast<int64_t>((rows + global - 1) / global);
}

bool ValidationIterator::next(Batch& batch) {
  if (step_ >= num_batches_) return false;
  batch = empty_batch(config_.local_batch, config_.seq_len);
  fill_rank_rows(config_, *stream_, batch);
  batch.step = step_++;
  return true;
}

}  // namespace titan::data
