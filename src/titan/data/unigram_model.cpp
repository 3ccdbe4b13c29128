#include "titan/data/unigram_model.h"

#include <algorithm>
#include <limits>

#include "titan/core/error.h"

namespace titan::data {
namespace {

// SentencePiece's and Hugging Face's penalty below the lowest piece score for an unknown character.
constexpr double kUnknownPenalty = 10.0;

size_t utf8_length(uint8_t lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

}  // namespace

UnigramModel::UnigramModel(std::vector<std::pair<std::string, double>> pieces, std::optional<uint32_t> unk_id,
                           std::string source)
    : source_(std::move(source)), pieces_(std::move(pieces)), unk_id_(unk_id) {
  TITAN_CHECK(!pieces_.empty(), "{}: model.vocab: the Unigram vocabulary is empty", source_);
  TITAN_CHECK(!unk_id_ || *unk_id_ < pieces_.size(), "{}: model.unk_id: {} is outside the vocabulary of {}", source_,
              unk_id_.value_or(0), pieces_.size());
  min_score_ = std::numeric_limits<double>::infinity();
  id_of_.reserve(pieces_.size());
  for (uint32_t id = 0; id < pieces_.size(); ++id) {
    const auto& [text, score] = pieces_[id];
    TITAN_CHECK(!text.empty(), "{}: model.vocab[{}]: empty piece", source_, id);
    id_of_[text] = id;
    min_score_ = std::min(min_score_, score);
    max_piece_bytes_ = std::max(max_piece_bytes_, text.size());
  }
}

void UnigramModel::encode(std::string_view text, std::vector<uint32_t>& out) const {
  if (text.empty()) return;
  struct Node {
    double score = 0;
    size_t start = std::string_view::npos;  // npos: not reached yet
    uint32_t id = 0;
  };
  const size_t n = text.size();
  const double unk_score = min_score_ - kUnknownPenalty;
  std::vector<Node> best(n + 1);
  best[0].start = 0;
  for (size_t start = 0; start < n;) {
    const double here = best[start].score;
    const size_t char_bytes = std::min(utf8_length(static_cast<uint8_t>(text[start])), n - start);
    bool covers_char = false;
    // Every piece that starts here, shortest first; a tie keeps the first
    // (Hugging Face's trie walk and its strict "greater than").
    const size_t longest = std::min(max_piece_bytes_, n - start);
    for (size_t length = 1; length <= longest; ++length) {
      const auto found = id_of_.find(text.substr(start, length));
      if (found == id_of_.end()) continue;
      Node& target = best[start + length];
      const double candidate = here + pieces_[found->second].second;
      if (target.start == std::string_view::npos || candidate > target.score)
        target = {candidate, start, found->second};
      covers_char = covers_char || length == char_bytes;
    }
    if (!covers_char) {
      TITAN_CHECK(unk_id_.has_value(), "{}: the text holds '{}', which no piece covers, and model.unk_id is not set",
                  source_, text.substr(start, char_bytes));
      Node& target = best[start + char_bytes];
      const double candidate = here + unk_score;
      if (target.start == std::string_view::npos || candidate > target.score) target = {candidate, start, *unk_id_};
    }
    start += char_bytes;
  }
  // Back from the end; consecutive unknowns fuse into one piece, which is
  // looked up as text (and is unk unless the vocabulary holds it).
  std::vector<std::pair<size_t, size_t>> spans;  // reversed
  std::vector<bool> unknown;
  for (size_t end = n; end > 0;) {
    const Node& node = best[end];
    const bool is_unk = unk_id_ && node.id == *unk_id_;
    if (is_unk && !unknown.empty() && unknown.back()) {
      spans.back().first = node.start;
    } else {
      spans.emplace_back(node.start, end);
      unknown.push_back(is_unk);
    }
    end = node.start;
  }
  for (size_t i = spans.size(); i-- > 0;) {
    const auto [begin, end] = spans[i];
    const auto found = id_of_.find(text.substr(begin, end - begin));
    if (found != id_of_.end()) {
      out.push_back(found->second);
    } else {
      out.push_back(*unk_id_);
    }
  }
}

}  // namespace titan::data
