// Captions as the fixed-length rows of ids a frozen text encoder takes
// (FLUX's T5 and CLIP), as Hugging Face tokenizers makes them with truncation
// and padding to max_length: the text's ids cut so that the post-processor's
// BOS/EOS still fit (they are kept, the text is cut), then padding on the
// right, with a mask of 1 for tokens and 0 for padding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "titan/data/tokenizer.h"

namespace titan::data {

struct PaddingOptions {
  size_t max_length = 0;
  uint32_t pad_id = 0;
  bool add_bos = false;
  bool add_eos = false;
};

struct PaddedIds {
  size_t rows = 0, length = 0;
  std::vector<int64_t> ids;   // [rows, length], row-major
  std::vector<int64_t> mask;  // [rows, length]: 1 a token, 0 padding
};

// Text given as is: special-token text stays text (EncodeOptions::allow_special off).
PaddedIds encode_padded(const Tokenizer& tokenizer, std::span<const std::string> texts, const PaddingOptions& options);

// FLUX's settings. T5 (text_encoder_2): "</s>" closes the text, "<pad>"
// pads, max_length 512 for flux-dev and 256 for flux-schnell. CLIP
// (text_encoder): the BOS and EOS of the tokenizer.json, padded with the EOS
// id (CLIPTokenizer's pad_token is "<|endoftext|>"), 77 positions. Errors
// name the tokenizer when it lacks the token.
PaddingOptions t5_padding(const Tokenizer& tokenizer, size_t max_length);
PaddingOptions clip_padding(const Tokenizer& tokenizer, size_t max_length = 77);

}  // namespace titan::data
