#include "titan/data/padded_encoding.h"

#include "titan/core/error.h"

namespace titan::data {

PaddedIds encode_padded(const Tokenizer& tokenizer, std::span<const std::string> texts, const PaddingOptions& options) {
  const size_t specials = size_t{options.add_bos} + size_t{options.add_eos};
  TITAN_CHECK(options.max_length > specials, "tokenizer {}: max_length {} leaves no room for text beside {} BOS/EOS",
              tokenizer.name(), options.max_length, specials);
  TITAN_CHECK(options.pad_id < tokenizer.vocab_size(), "tokenizer {}: pad id {} is outside the vocabulary of {}",
              tokenizer.name(), options.pad_id, tokenizer.vocab_size());
  PaddedIds out;
  out.rows = texts.size();
  out.length = options.max_length;
  out.ids.assign(out.rows * out.length, options.pad_id);
  out.mask.assign(out.rows * out.length, 0);
  std::vector<uint32_t> ids;
  for (size_t row = 0; row < texts.size(); ++row) {
    ids.clear();
    tokenizer.encode_into(texts[row], {}, ids);
    ids.resize(std::min(ids.size(), options.max_length - specials));
    std::vector<uint32_t> full;
    full.reserve(ids.size() + specials);
    if (options.add_bos) full.push_back(*tokenizer.bos_id());
    full.insert(full.end(), ids.begin(), ids.end());
    if (options.add_eos) full.push_back(*tokenizer.eos_id());
    for (size_t i = 0; i < full.size(); ++i) {
      out.ids[row * out.length + i] = full[i];
      out.mask[row * out.length + i] = 1;
    }
  }
  return out;
}

PaddingOptions t5_padding(const Tokenizer& tokenizer, size_t max_length) {
  TITAN_CHECK(tokenizer.eos_id().has_value(), "tokenizer {}: T5 needs an EOS token (\"</s>\")", tokenizer.name());
  return {.max_length = max_length, .pad_id = tokenizer.special_token_id("<pad>"), .add_bos = false, .add_eos = true};
}

PaddingOptions clip_padding(const Tokenizer& tokenizer, size_t max_length) {
  TITAN_CHECK(tokenizer.bos_id().has_value() && tokenizer.eos_id().has_value(),
              "tokenizer {}: CLIP needs BOS and EOS tokens (<|startoftext|>, <|endoftext|>)", tokenizer.name());
  return {.max_length = max_length, .pad_id = *tokenizer.eos_id(), .add_bos = true, .add_eos = true};
}

}  // namespace titan::data
