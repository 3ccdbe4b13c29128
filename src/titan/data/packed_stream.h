// Packing: documents concatenated as [BOS] tokens [EOS] into one stream, cut
// into rows of seq_len. Each row holds input ids, labels (the next token),
// positions and document ids:
//   - positions count from 0 at each document start and at each row start
//     (a document cut by a row boundary restarts at 0, so positions never
//     exceed seq_len and RoPE tables sized for seq_len suffice);
//   - document ids number the documents within the row from 0;
//   - labels: the next token of the stream. With document masking on, the
//     last token of each document gets kIgnoreIndex (-100) instead: its next
//     token is the start of another document, which that position cannot
//     see. With masking off the model attends across documents, so predicting
//     the next document's first token (BOS after EOS) is an ordinary target,
//     as in GPT-style packing.
// The row's last label peeks at the first token of the next row, so no token
// of the stream goes unpredicted.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "titan/data/token_corpus.h"

namespace titan::data {

constexpr int64_t kIgnoreIndex = -100;  // what ops::cross_entropy skips

class PackedStream {
 public:
  struct Options {
    std::optional<uint32_t> bos, eos;
    bool shuffle = true;  // a new permutation of the documents each epoch
    bool repeat = true;   // epochs follow one another (training); else one pass (validation)
    uint64_t seed = 0;
    bool document_masking = false;
    uint32_t pad_id = 0;  // fills rows after the end of a non-repeating stream
  };
  // Where the stream is: epoch, index into the epoch's document order, and
  // offset into that document's [BOS] tokens [EOS].
  struct Cursor {
    uint64_t epoch = 0, position = 0, offset = 0;
    bool operator==(const Cursor&) const = default;
  };

  // `documents`: indices into `corpus` that this stream uses (e.g. the training split).
  PackedStream(std::shared_ptr<const TokenCorpus> corpus, std::vector<uint64_t> documents, const Options& options);

  // Fills one row (arrays of seq_len). Returns the number of real (non-pad)
  // tokens: seq_len except at the end of a non-repeating stream.
  int64_t next_row(int64_t seq_len, int64_t* inputs, int64_t* labels, int64_t* positions, int64_t* document_ids);
  // Advances by `rows` rows without producing them (other ranks' rows).
  void skip_rows(uint64_t rows, int64_t seq_len);
  bool exhausted() const;

  Cursor cursor() const { return cursor_; }
  void set_cursor(const Cursor& cursor);
  uint64_t num_documents() const { return documents_.size(); }
  // Tokens in one pass over the documents, BOS/EOS included.
  uint64_t tokens_per_epoch() const { return tokens_per_epoch_; }

 private:
  uint64_t document_at(uint64_t epoch, uint64_t position);  // corpus index
  uint64_t stream_length(uint64_t document) const;
  int64_t stream_token(uint64_t document, uint64_t offset) const;
  // Moves the cursor to the next document with a non-empty stream; false at the end.
  bool advance_document(Cursor& cursor);
  // The first token after `cursor`'s document, or nullopt at the end.
  std::optional<int64_t> peek_next_document(Cursor cursor);

  std::shared_ptr<const TokenCorpus> corpus_;
  std::vector<uint64_t> documents_;
  Options options_;
  Cursor cursor_;
  uint64_t tokens_per_epoch_ = 0;
  // Permutations of the two most recent epochs (rows peek one epoch ahead).
  uint64_t order_epoch_[2] = {~0ull, ~0ull};
  std::vector<uint64_t> order_[2];
};

}  // namespace titan::data
