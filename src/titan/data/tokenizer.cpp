#include "titan/data/tokenizer.h"

#include <omp.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "titan/core/error.h"
#include "titan/data/encode_cache.h"
#include "titan/data/hashing.h"
#include "titan/data/utf8.h"

namespace titan::data {

struct Tokenizer::Scratch {
  std::vector<std::unique_ptr<SplitPattern::Scratch>> split;
  std::vector<std::vector<size_t>> ends;  // piece ends, one list per pattern level
  BpeWork work;
  EncodeCache cache;
  std::string prefixed;
  std::vector<PreToken> pieces;
  SplitScratchCache general;  // the general pipeline's patterns
};

struct ScratchPool {
  std::mutex mutex;
  std::vector<std::unique_ptr<Tokenizer::Scratch>> free;
};

struct Tokenizer::Segment {
  enum Kind : uint8_t { kText, kInvalid, kSpecial };
  size_t begin = 0, end = 0;
  Kind kind = kText;
  bool starts_region = false;  // first text after the start or a special token
  uint32_t id = 0;             // for kSpecial
};

// Borrows a scratch from the pool for one encode call and gives it back.
class Tokenizer::ScratchLease {
 public:
  explicit ScratchLease(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {
    {
      std::lock_guard<std::mutex> lock(tokenizer.pool_->mutex);
      if (!tokenizer.pool_->free.empty()) {
        scratch_ = std::move(tokenizer.pool_->free.back());
        tokenizer.pool_->free.pop_back();
      }
    }
    if (!scratch_) {
      scratch_ = std::make_unique<Scratch>();
      for (const auto& pattern : tokenizer.patterns_) scratch_->split.push_back(pattern->make_scratch());
      scratch_->ends.resize(tokenizer.patterns_.size());
    }
  }
  ~ScratchLease() {
    std::lock_guard<std::mutex> lock(tokenizer_.pool_->mutex);
    tokenizer_.pool_->free.push_back(std::move(scratch_));
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  Scratch& operator*() { return *scratch_; }

 private:
  const Tokenizer& tokenizer_;
  std::unique_ptr<Scratch> scratch_;
};

Tokenizer::Tokenizer(TokenizerConfig config)
    : name_(std::move(config.name)),
      model_(std::move(config.model)),
      pattern_texts_(std::move(config.split_patterns)),
      add_prefix_space_(config.add_prefix_space),
      specials_(std::move(config.specials)),
      bos_(config.bos),
      eos_(config.eos),
      pipeline_(std::move(config.pipeline)),
      normalizer_(std::move(config.normalizer)),
      unigram_(std::move(config.unigram)),
      metaspace_decoding_(std::move(config.metaspace_decoding)),
      metaspace_strip_first_(config.metaspace_strip_first),
      pool_(std::make_unique<ScratchPool>()) {
  TITAN_CHECK(!unigram_ || pipeline_, "{}: a Unigram model runs only in the general pipeline", name_);
  for (size_t i = 0; i < pattern_texts_.size(); ++i) {
    const bool literal = i < config.literal_patterns.size() && config.literal_patterns[i];
    patterns_.push_back(std::make_unique<SplitPattern>(pattern_texts_[i], name_, literal));
  }
  vocab_size_ = unigram_ ? unigram_->size() : model_.size();
  for (const auto& special : specials_) {
    TITAN_CHECK(!special.text.empty(), "{}: special token {} has empty text", name_, special.id);
    // An id is one string: an added token may repeat a vocabulary entry, never replace one.
    TITAN_CHECK(!model_has(special.id) || model_token(special.id) == special.text,
                "{}: added token '{}' has id {}, which the vocabulary already uses for another token", name_,
                special.text, special.id);
    vocab_size_ = std::max(vocab_size_, special.id + 1);
  }
  special_of_id_.assign(vocab_size_, -1);
  for (size_t i = 0; i < specials_.size(); ++i) {
    const SpecialToken& special = specials_[i];
    const int32_t previous = special_of_id_[special.id];
    TITAN_CHECK(previous < 0 || specials_[static_cast<size_t>(previous)].text == special.text,
                "{}: added tokens '{}' and '{}' share id {}", name_,
                specials_[static_cast<size_t>(std::max(previous, 0))].text, special.text, special.id);
    if (previous < 0) special_of_id_[special.id] = static_cast<int32_t>(i);
    special_index_.emplace(special.text, i);
    const auto first = static_cast<uint8_t>(special.text[0]);
    (special.special ? first_byte_special_ : first_byte_always_)[first] = true;
    has_always_ = has_always_ || !special.special;
    special_has_newline_ = special_has_newline_ || special.text.find('\n') != std::string::npos;
    if (std::find(special_lengths_.begin(), special_lengths_.end(), special.text.size()) == special_lengths_.end()) {
      special_lengths_.push_back(special.text.size());
    }
  }
  std::sort(special_lengths_.rbegin(), special_lengths_.rend());
  for (uint32_t id : {bos_.value_or(0), eos_.value_or(0)}) {
    TITAN_CHECK(id < vocab_size_, "{}: BOS/EOS id {} is outside the vocabulary of {}", name_, id, vocab_size_);
  }
}

bool Tokenizer::model_has(uint32_t id) const { return unigram_ ? id < unigram_->size() : model_.has(id); }

std::string_view Tokenizer::model_token(uint32_t id) const {
  return unigram_ ? std::string_view(unigram_->piece(id)) : model_.token(id);
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::optional<uint32_t> Tokenizer::find_special_token(std::string_view text) const {
  const auto found = special_index_.find(text);
  if (found == special_index_.end()) return std::nullopt;
  return specials_[found->second].id;
}

uint32_t Tokenizer::special_token_id(std::string_view text) const {
  if (auto id = find_special_token(text)) return *id;
  std::string known;
  for (size_t i = 0; i < specials_.size() && i < 8; ++i) known += (i ? ", " : "") + specials_[i].text;
  if (specials_.size() > 8) known += fmt::format(", ... ({} in all)", specials_.size());
  fail("unknown special token '{}' for tokenizer {} (it has: {})", text, name_,
       specials_.empty() ? std::string("none") : known);
}

uint64_t Tokenizer::fingerprint() const {
  uint64_t h = hash_bytes("titan tokenizer", 15, vocab_size_);
  for (uint32_t id = 0; id < vocab_size_; ++id) {
    const bool used = special_of_id_[id] >= 0 || model_has(id);  // ids may have holes (reserved, unused)
    const std::string_view bytes = used ? token_bytes(id) : std::string_view();
    h = hash_bytes(bytes.data(), bytes.size(), h ^ used);
  }
  for (const SpecialToken& special : specials_) {
    h = hash_bytes(special.text.data(), special.text.size(), h ^ (uint64_t{special.id} << 1 | special.special));
  }
  for (const std::string& pattern : pattern_texts_) h = hash_bytes(pattern.data(), pattern.size(), h);
  // The general pipeline: every step as its file wrote it, the Unigram scores, the BPE suffix.
  if (pipeline_) {
    h = hash_bytes("pipeline", 8, h);
    for (const auto& step : normalizer_.steps()) h = hash_bytes(step.describe.data(), step.describe.size(), h);
    for (const auto& step : *pipeline_) h = hash_bytes(step.describe.data(), step.describe.size(), h);
    const std::string& suffix = model_.end_of_word_suffix();
    h = hash_bytes(suffix.data(), suffix.size(), h);
  }
  if (unigram_) {
    for (uint32_t id = 0; id < unigram_->size(); ++id) {
      const double score = unigram_->score(id);
      h = hash_bytes(&score, sizeof(score), h);
    }
    h = hash_bytes("unk", 3, h ^ (unigram_->unk_id() ? *unigram_->unk_id() + 1ull : 0ull));
  }
  const uint64_t ends[2] = {bos_ ? *bos_ + 1ull : 0ull, eos_ ? *eos_ + 1ull : 0ull};
  return hash_bytes(ends, sizeof(ends), h ^ static_cast<uint64_t>(add_prefix_space_));
}

std::string_view Tokenizer::token_bytes(uint32_t id) const {
  TITAN_CHECK(id < vocab_size_, "token id {} is outside the vocabulary of {} ({} ids)", id, name_, vocab_size_);
  if (special_of_id_[id] >= 0) return specials_[static_cast<size_t>(special_of_id_[id])].text;
  TITAN_CHECK(model_has(id), "token id {} is not used by tokenizer {}", id, name_);
  return model_token(id);
}

std::string Tokenizer::decode(std::span<const uint32_t> ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  if (metaspace_decoding_.empty()) {
    for (uint32_t id : ids) out += token_bytes(id);
    return out;
  }
  const std::string& mark = metaspace_decoding_;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string_view token = token_bytes(ids[i]);
    for (size_t at = 0; at < token.size();) {
      if (token.compare(at, mark.size(), mark) == 0) {
        if (i > 0 || !metaspace_strip_first_) out += ' ';
        at += mark.size();
      } else {
        out += token[at++];
      }
    }
  }
  return out;
}

void Tokenizer::find_segments(std::string_view text, bool allow_special, std::vector<Segment>& segments) const {
  segments.clear();
  const bool match_specials = (allow_special && !specials_.empty()) || has_always_;
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  // Leftmost-longest special token at or after `from` (Hugging Face's added
  // token matcher); text.size() when there is none.
  auto next_special = [&](size_t from, size_t& length, uint32_t& id) -> size_t {
    if (!match_specials) return text.size();
    for (size_t i = from; i < text.size(); ++i) {
      const uint8_t b = bytes[i];
      if (!((allow_special && first_byte_special_[b]) || first_byte_always_[b])) continue;
      for (size_t candidate : special_lengths_) {
        if (candidate > text.size() - i) continue;
        const auto found = special_index_.find(text.substr(i, candidate));
        if (found == special_index_.end()) continue;
        const SpecialToken& special = specials_[found->second];
        if (allow_special || !special.special) {
          length = candidate;
          id = special.id;
          return i;
        }
      }
    }
    return text.size();
  };
  size_t pos = 0;
  bool region_start = true;
  while (pos < text.size()) {
    size_t length = 0;
    uint32_t id = 0;
    const size_t special_at = next_special(pos, length, id);
    // Cut the ordinary text before it into valid UTF-8 runs and invalid bytes.
    while (pos < special_at) {
      const std::string_view rest = text.substr(pos, special_at - pos);
      const size_t valid = valid_utf8_prefix(rest);
      if (valid > 0) {
        segments.push_back(Segment{pos, pos + valid, Segment::kText, region_start, 0});
        pos += valid;
      } else {
        const size_t invalid = invalid_utf8_prefix(rest);
        segments.push_back(Segment{pos, pos + invalid, Segment::kInvalid, false, 0});
        pos += invalid;
      }
      region_start = false;
    }
    if (special_at < text.size()) {
      segments.push_back(Segment{special_at, special_at + length, Segment::kSpecial, false, id});
      pos = special_at + length;
      region_start = true;
    }
  }
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<uint32_t>& out, Scratch& scratch) const {
  const uint64_t hash = hash_bytes(piece);
  if (model_.ignore_merges()) {
    if (auto id = model_.find(piece, hash)) {
      out.push_back(*id);
      return;
    }
  }
  if (scratch.cache.find(piece, hash, out)) return;
  const size_t start = out.size();
  model_.merge(piece, out, scratch.work);
  scratch.cache.insert(piece, hash, out.data() + start, out.size() - start);
}

// One valid UTF-8 text segment through the general pipeline.
void Tokenizer::encode_general(std::string_view text, bool at_input_start, std::vector<uint32_t>& out,
                               Scratch& scratch) const {
  const std::string normalized = normalizer_.empty() ? std::string() : normalizer_.normalize(text, scratch.general);
  pre_tokenize(*pipeline_, normalizer_.empty() ? text : std::string_view(normalized), at_input_start, scratch.pieces,
               scratch.general);
  for (const PreToken& piece : scratch.pieces) {
    if (unigram_) {
      unigram_->encode(piece.text, out);
    } else if (model_.ignore_merges() && model_.find(piece.text)) {
      out.push_back(*model_.find(piece.text));  // Hugging Face looks the piece up without the suffix
    } else {
      model_.merge(piece.text, out, scratch.work);
    }
  }
}

// Pieces of level `level - 1` split again by pattern `level` (Hugging Face
// Sequence pre-tokenizers), down to BPE.
void Tokenizer::split_chain(std::string_view text, size_t level, std::vector<uint32_t>& out, Scratch& scratch) const {
  if (level >= patterns_.size()) {
    encode_piece(text, out, scratch);
    return;
  }
  std::vector<size_t>& ends = scratch.ends[level];
  ends.clear();
  patterns_[level]->split(text, 0, text.size(), ends, *scratch.split[level]);
  // Deeper levels have their own lists, so this one survives the recursion.
  size_t start = 0;
  for (size_t i = 0; i < ends.size(); ++i) {
    const size_t end = scratch.ends[level][i];
    split_chain(text.substr(start, end - start), level + 1, out, scratch);
    start = end;
  }
}

void Tokenizer::encode_text_segment(std::string_view subject, size_t begin, size_t stop, size_t* reached,
                                    std::vector<uint32_t>& out, Scratch& scratch) const {
  if (patterns_.empty()) {
    encode_piece(subject.substr(begin), out, scratch);
    *reached = subject.size();
    return;
  }
  std::vector<size_t>& ends = scratch.ends[0];
  ends.clear();
  *reached = patterns_[0]->split(subject, begin, stop, ends, *scratch.split[0]);
  size_t start = begin;
  for (size_t i = 0; i < ends.size(); ++i) {
    const size_t end = scratch.ends[0][i];
    const std::string_view piece = subject.substr(start, end - start);
    if (patterns_.size() > 1) {
      split_chain(piece, 1, out, scratch);
    } else {
      encode_piece(piece, out, scratch);
    }
    start = end;
  }
}

bool Tokenizer::encode_range(std::string_view text, const std::vector<Segment>& segments, size_t begin, size_t end,
                             std::vector<uint32_t>& out, Scratch& scratch) const {
  auto it = std::partition_point(segments.begin(), segments.end(),
                                 [&](const Segment& segment) { return segment.end <= begin; });
  for (; it != segments.end() && it->begin < end; ++it) {
    const Segment& segment = *it;
    switch (segment.kind) {
      case Segment::kSpecial:
        out.push_back(segment.id);
        break;
      case Segment::kInvalid:
        if (unigram_) {
          // Not text, so no normalizer or piece applies: Hugging Face would not take it at all.
          TITAN_CHECK(unigram_->unk_id().has_value(), "{}: the text holds invalid UTF-8 and the model has no unk_id",
                      name_);
          out.push_back(*unigram_->unk_id());
        } else {
          encode_piece(text.substr(segment.begin, segment.end - segment.begin), out, scratch);
        }
        break;
      case Segment::kText: {
        if (pipeline_) {
          encode_general(text.substr(segment.begin, segment.end - segment.begin), segment.begin == 0, out, scratch);
          break;
        }
        std::string_view subject = text.substr(segment.begin, segment.end - segment.begin);
        size_t local_begin = std::max(begin, segment.begin) - segment.begin;
        size_t local_stop = std::min(end, segment.end) - segment.begin;
        if (add_prefix_space_ && segment.starts_region && local_begin == 0 && subject[0] != ' ') {
          scratch.prefixed.assign(1, ' ');
          scratch.prefixed += subject;
          subject = scratch.prefixed;
          local_stop += 1;
        }
        size_t reached = 0;
        encode_text_segment(subject, local_begin, local_stop, &reached, out, scratch);
        if (segment.end > end && reached != local_stop) return false;  // a piece crosses the split point
        break;
      }
    }
  }
  return true;
}

namespace {

bool is_ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Split points for a parallel encode: after a newline and before a letter, or
// between a letter and " letter" — places where the known split patterns
// always end a piece. Each one is still verified (encode_range), so an unusual
// pattern costs a sequential re-encode, never a different result.
std::vector<size_t> choose_split_points(std::string_view text, int threads) {
  std::vector<size_t> points{0};
  constexpr size_t kMinChunk = 32 * 1024, kSearch = 16 * 1024;
  const size_t chunks =
      std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(threads) * 8, text.size() / kMinChunk));
  const size_t step = text.size() / chunks;
  for (size_t k = 1; k < chunks; ++k) {
    const size_t target = std::max(points.back() + 1, k * step);
    const size_t limit = std::min(text.size() - 1, target + kSearch);
    for (size_t p = target; p < limit; ++p) {
      const bool after_newline = text[p - 1] == '\n' && is_ascii_letter(text[p]);
      const bool between_words = is_ascii_letter(text[p - 1]) && text[p] == ' ' && is_ascii_letter(text[p + 1]);
      if (after_newline || between_words) {
        points.push_back(p);
        break;
      }
    }
  }
  points.push_back(text.size());
  return points;
}

}  // namespace

void Tokenizer::encode_into(std::string_view text, const EncodeOptions& options, std::vector<uint32_t>& out) const {
  if (options.add_bos) {
    TITAN_CHECK(bos_.has_value(), "tokenizer {} has no BOS token", name_);
    out.push_back(*bos_);
  }
  std::vector<Segment> segments;
  find_segments(text, options.allow_special, segments);
  const bool parallel = options.threads > 1 && !pipeline_ && !add_prefix_space_ && !patterns_.empty() &&
                        !(special_has_newline_ && (options.allow_special || has_always_));
  const std::vector<size_t> points =
      parallel ? choose_split_points(text, options.threads) : std::vector<size_t>{0, text.size()};
  const size_t chunks = points.size() - 1;
  if (chunks <= 1) {
    ScratchLease scratch(*this);
    encode_range(text, segments, 0, text.size(), out, *scratch);
  } else {
    std::vector<std::vector<uint32_t>> parts(chunks);
    std::vector<char> aligned(chunks, 1);
    std::exception_ptr error;
#pragma omp parallel for num_threads(options.threads) schedule(dynamic, 1)
    for (size_t c = 0; c < chunks; ++c) {
      try {
        ScratchLease scratch(*this);
        parts[c].reserve((points[c + 1] - points[c]) / 3);
        aligned[c] = encode_range(text, segments, points[c], points[c + 1], parts[c], *scratch);
      } catch (...) {
#pragma omp critical(titan_tokenizer_error)
        error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    if (std::all_of(aligned.begin(), aligned.end(), [](char a) { return a != 0; })) {
      size_t total = 0;
      for (const auto& part : parts) total += part.size();
      out.reserve(out.size() + total);
      for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
    } else {
      ScratchLease scratch(*this);
      encode_range(text, segments, 0, text.size(), out, *scratch);
    }
  }
  if (options.add_eos) {
    TITAN_CHECK(eos_.has_value(), "tokenizer {} has no EOS token", name_);
    out.push_back(*eos_);
  }
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 2);
  encode_into(text, options, out);
  return out;
}

}  // namespace titan::data
