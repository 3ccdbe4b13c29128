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
//
// Chat data (supervised fine-tuning) changes two things:
//   - loss masks: when the corpus gives documents a loss mask, the label at
//     position t (the document's token t + 1) is kept only when that token's
//     mask is 1 (an assistant token), else kIgnoreIndex; a label across
//     documents is always kIgnoreIndex;
//   - whole_documents: a row holds whole documents only. A document that does
//     not fit in what is left of the row starts the next row, and the rest of
//     the row is padding, exactly like the padding at the end of a one-pass
//     stream: pad_id inputs, kIgnoreIndex labels, one more document id, and
//     positions counting from 0. Labels at document ends are kIgnoreIndex (as
//     with document masking). A document longer than a row (the chat overlong
//     policy leaves none) starts a row and continues into the next.
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
    bool whole_documents = false;  // see above
    uint32_t pad_id = 0;           // fills rows after the end of a non-repeating stream
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
  // Advances by `rows` rows without producing them (other ranks' rows):
  // exactly where producing them would leave the cursor.
  void skip_rows(uint64_t rows, int64_t seq_len);
  bool exhausted() const;
  // Rows left in a one-pass stream (validation), from the cursor on.
  uint64_t rows_left(int64_t seq_len) const;

  Cursor cursor() const { return cursor_; }
  void set_cursor(const Cursor& cursor);
  uint64_t num_documents() const { return documents_.size(); }
  // Tokens in one pass over the documents, BOS/EOS included.
  uint64_t tokens_per_epoch() const { return tokens_per_epoch_; }

 private:
  uint64_t document_at(uint64_t epoch, uint64_t position);  // corpus index
  uint64_t stream_length(uint64_t document) const;
  int64_t stream_token(uint64_t document, uint64_t offset) const;
  // Whether the stream token at `offset` is a trained label: its loss-mask
  // byte (an added EOS follows the document's last token, an added BOS never
  // is); always without loss masks.
  bool trained(uint64_t document, uint64_t offset) const;
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
