// libFuzzer entry point: tiktoken rank files, plain and in the npm package's
// packed form, and BPE over the ranks they hold.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "titan/core/error.h"
#include "titan/data/bpe_model.h"
#include "titan/data/tiktoken_ranks.h"

namespace {

void encode_with(std::vector<std::string> ranks) {
  try {
    const auto model = titan::data::BpeModel::from_ranks(std::move(ranks), "fuzz");
    titan::data::BpeWork work;
    std::vector<uint32_t> ids;
    const std::string text = "the quick brown fox \x01\x02\xFF\xFE jumps";
    model.merge(text, ids, work);
    std::string decoded;
    for (uint32_t id : ids) decoded += model.token(id);
    if (decoded != text) std::abort();
  } catch (const titan::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    encode_with(titan::data::parse_tiktoken_ranks(input, "fuzz.tiktoken"));
  } catch (const titan::Error&) {
  }
  try {
    encode_with(titan::data::parse_tiktoken_packed_ranks(input, "fuzz.json"));
  } catch (const titan::Error&) {
  }
  return 0;
}
