// The SentencePiece Unigram model of a tokenizer.json (T5, ALBERT, XLNet...):
// pieces with log-probability scores; a text piece is cut by Viterbi into the
// segmentation with the highest total score, as Hugging Face tokenizers does
// (its encode_optimized, itself SentencePiece's): characters no piece starts
// with become unk, and a run of them one unk token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace titan::data {

class UnigramModel {
 public:
  UnigramModel() = default;
  // `pieces[i]` = (text, score) of id i. Errors name `source`.
  UnigramModel(std::vector<std::pair<std::string, double>> pieces, std::optional<uint32_t> unk_id, std::string source);

  uint32_t size() const { return static_cast<uint32_t>(pieces_.size()); }
  const std::string& piece(uint32_t id) const { return pieces_[id].first; }
  double score(uint32_t id) const { return pieces_[id].second; }
  std::optional<uint32_t> unk_id() const { return unk_id_; }

  // Appends the ids of the best segmentation of valid UTF-8 `text`. A
  // character that no piece covers needs an unk id: a titan::Error without one.
  void encode(std::string_view text, std::vector<uint32_t>& out) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  std::string source_;
  std::vector<std::pair<std::string, double>> pieces_;
  std::unordered_map<std::string, uint32_t, Hash, std::equal_to<>> id_of_;  // a repeated piece: the last id
  std::optional<uint32_t> unk_id_;
  double min_score_ = 0;
  size_t max_piece_bytes_ = 0;
};

}  // namespace titan::data
