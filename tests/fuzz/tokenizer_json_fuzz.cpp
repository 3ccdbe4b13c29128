// libFuzzer entry point: tokenizer.json parsing, and encoding with whatever
// tokenizer a well-formed input describes (byte-level BPE, or the general
// pipeline: normalizers with a precompiled charsmap, Metaspace, Unigram; the
// corpus seeds t5_style_tiny_charsmap.json and clip_style.json reach it). Any titan::Error is a correct
// answer; a crash, a sanitizer report or a failed round trip is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "titan/core/error.h"
#include "titan/data/hf_tokenizer_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    titan::data::Tokenizer tokenizer(titan::data::parse_hf_tokenizer_json(input, "fuzz/tokenizer.json"));
    const std::string text = "Hello, world! it's 2024 \xF0\x9F\x99\x82 \xFF\xC3 " + input.substr(0, 256);
    const auto ids = tokenizer.encode(text, {.allow_special = true});
    // Byte-level BPE gives the text back; a normalizer or Metaspace (the general pipeline) need not.
    if (!tokenizer.add_prefix_space() && !tokenizer.general_pipeline() && tokenizer.decode(ids) != text) std::abort();
    if (tokenizer.general_pipeline()) (void)tokenizer.decode(ids);
  } catch (const titan::Error&) {
  }
  return 0;
}
