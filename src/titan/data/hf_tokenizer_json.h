// Reading and writing Hugging Face tokenizer.json files for byte-level BPE
// (GPT-2, Llama 3, Qwen-style): the BPE model, its merges, added/special
// tokens, the pre-tokenizer's split regexes and the BOS/EOS template.
// Anything else a file asks for (normalizers, other models) is refused with a
// clear error rather than tokenized differently.
#pragma once

#include <string>
#include <string_view>

#include "titan/data/tokenizer.h"

namespace titan::data {

// Parses tokenizer.json text; errors name `source` and the key at fault.
TokenizerConfig parse_hf_tokenizer_json(std::string_view content, std::string_view source);

// tokenizer.json text for a byte-level BPE tokenizer (one split pattern at most).
std::string hf_tokenizer_json(const Tokenizer& tokenizer);

}  // namespace titan::data
