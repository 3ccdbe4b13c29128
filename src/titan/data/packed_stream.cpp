#include "titan/data/packed_stream.h"

#include "titan/core/error.h"
#include "titan/core/philox.h"

namespace titan::data {

PackedStream::PackedStream(std::shared_ptr<const TokenCorpus> corpus, std::vector<uint64_t> documents,
                           const Options& options)
    : corpus_(std::move(corpus)), documents_(std::move(documents)), options_(options) {
  for (uint64_t d : documents_) tokens_per_epoch_ += stream_length(d);
  TITAN_CHECK(tokens_per_epoch_ > 0 || !options_.repeat, "packing: the documents hold no tokens");
  if (tokens_per_epoch_ == 0) {
    cursor_.position = documents_.size();  // nothing to read: exhausted from the start
  } else if (stream_length(document_at(0, 0)) == 0) {
    advance_document(cursor_);
  }
}

uint64_t PackedStream::stream_length(uint64_t document) const {
  return corpus_->document(document).size() + (options_.bos ? 1 : 0) + (options_.eos ? 1 : 0);
}

int64_t PackedStream::stream_token(uint64_t document, uint64_t offset) const {
  if (options_.bos) {
    if (offset == 0) return *options_.bos;
    --offset;
  }
  const auto tokens = corpus_->document(document);
  return offset < tokens.size() ? tokens[offset] : *options_.eos;
}

// Fisher-Yates with Philox draws keyed by (seed, epoch): the same order on
// every machine, thread count and standard library.
uint64_t PackedStream::document_at(uint64_t epoch, uint64_t position) {
  if (!options_.shuffle) return documents_[position];
  const int slot = static_cast<int>(epoch & 1);
  if (order_epoch_[slot] != epoch) {
    std::vector<uint64_t>& order = order_[slot];
    order = documents_;
    for (uint64_t i = order.size(); i > 1; --i) {
      const Philox4x32 r = philox4x32_10(i, epoch, options_.seed);
      const uint64_t bits = (static_cast<uint64_t>(r.x[1]) << 32) | r.x[0];
      const uint64_t j = bits % i;  // bias below i / 2^64: nil for any real corpus
      std::swap(order[i - 1], order[j]);
    }
    order_epoch_[slot] = epoch;
  }
  return order_[slot][position];
}

bool PackedStream::trained(uint64_t document, uint64_t offset) const {
  if (!corpus_->is_chat()) return true;
  if (options_.bos) {
    if (offset == 0) return false;
    --offset;
  }
  const auto mask = corpus_->loss_mask(document);
  if (offset < mask.size()) return mask[offset] == 1;
  return !mask.empty() && mask.back() == 1;  // the added EOS
}

bool PackedStream::advance_document(Cursor& cursor) {
  do {
    cursor.offset = 0;
    if (++cursor.position >= documents_.size()) {
      if (!options_.repeat) {
        cursor.position = documents_.size();
        return false;
      }
      cursor.position = 0;
      ++cursor.epoch;
    }
  } while (stream_length(document_at(cursor.epoch, cursor.position)) == 0);
  return true;
}

bool PackedStream::exhausted() const { return cursor_.position >= documents_.size(); }

std::optional<int64_t> PackedStream::peek_next_document(Cursor cursor) {
  if (!advance_document(cursor)) return std::nullopt;
  return stream_token(document_at(cursor.epoch, cursor.position), 0);
}

void PackedStream::set_cursor(const Cursor& cursor) {
  TITAN_CHECK(cursor.position < documents_.size() || (!options_.repeat && cursor.position == documents_.size()),
              "packing: cursor position {} is outside the {} documents", cursor.position, documents_.size());
  if (cursor.position < documents_.size()) {
    TITAN_CHECK(cursor.offset < stream_length(document_at(cursor.epoch, cursor.position)),
                "packing: cursor offset {} is outside document {}", cursor.offset, cursor.position);
  }
  cursor_ = cursor;
}

int64_t PackedStream::next_row(int64_t seq_len, int64_t* inputs, int64_t* labels, int64_t* positions,
                               int64_t* document_ids) {
  int64_t document_id = 0;
  int64_t position = 0;
  int64_t filled = 0;
  for (; filled < seq_len && !exhausted(); ++filled) {
    const uint64_t document = document_at(cursor_.epoch, cursor_.position);
    const uint64_t length = stream_length(document);
    // Whole documents: one that does not fit in the rest of the row starts the next.
    if (options_.whole_documents && cursor_.offset == 0 && filled > 0 &&
        length > static_cast<uint64_t>(seq_len - filled)) {
      break;
    }
    if (cursor_.offset == 0 && filled > 0) {
      ++document_id;
      position = 0;
    }
    inputs[filled] = stream_token(document, cursor_.offset);
    positions[filled] = position++;
    document_ids[filled] = document_id;
    if (cursor_.offset + 1 < length) {
      labels[filled] =
          trained(document, cursor_.offset + 1) ? stream_token(document, cursor_.offset + 1) : kIgnoreIndex;
      ++cursor_.offset;
    } else {
      const bool across = !options_.document_masking && !options_.whole_documents && !corpus_->is_chat();
      const std::optional<int64_t> next = across ? peek_next_document(cursor_) : std::nullopt;
      labels[filled] = next ? *next : kIgnoreIndex;
      advance_document(cursor_);
    }
  }
  // Past the end of a one-pass stream, or after the last whole document that
  // fits: padding, as one more "document" that no label counts.
  for (int64_t i = filled; i < seq_len; ++i) {
    inputs[i] = options_.pad_id;
    labels[i] = kIgnoreIndex;
    positions[i] = i - filled;
    document_ids[i] = filled > 0 ? document_id + 1 : 0;
  }
  return filled;
}

void PackedStream::skip_rows(uint64_t rows, int64_t seq_len) {
  if (options_.whole_documents) {
    // Row by row, as next_row fills them.
    const auto s = static_cast<uint64_t>(seq_len);
    for (uint64_t row = 0; row < rows && !exhausted(); ++row) {
      uint64_t filled = 0;
      while (filled < s && !exhausted()) {
        const uint64_t length = stream_length(document_at(cursor_.epoch, cursor_.position));
        if (cursor_.offset == 0 && filled > 0 && length > s - filled) break;
        const uint64_t left = length - cursor_.offset;
        if (left > s - filled) {
          cursor_.offset += s - filled;
          break;
        }
        filled += left;
        advance_document(cursor_);
      }
    }
    return;
  }
  uint64_t remaining = rows * static_cast<uint64_t>(seq_len);
  while (remaining > 0 && !exhausted()) {
    const uint64_t left = stream_length(document_at(cursor_.epoch, cursor_.position)) - cursor_.offset;
    if (remaining < left) {
      cursor_.offset += remaining;
      return;
    }
    remaining -= left;
    advance_document(cursor_);
  }
}

uint64_t PackedStream::rows_left(int64_t seq_len) const {
  TITAN_CHECK(!options_.repeat, "packing: a repeating stream has no end to count rows to");
  const auto s = static_cast<uint64_t>(seq_len);
  if (!options_.whole_documents && cursor_ == Cursor{}) return (tokens_per_epoch_ + s - 1) / s;
  PackedStream probe = *this;
  uint64_t rows = 0;
  while (!probe.exhausted()) {
    probe.skip_rows(1, seq_len);
    ++rows;
  }
  return rows;
}

}  // namespace titan::data
