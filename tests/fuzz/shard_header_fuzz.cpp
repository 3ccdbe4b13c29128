// libFuzzer entry point: token shard headers, and opening the whole input as a
// memory-mapped shard (document table, checksum, reads of every document and
// of its loss mask when the shard has one).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "titan/core/error.h"
#include "titan/data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    titan::data::parse_shard_header(std::span<const uint8_t>(data, size), size, "fuzz.tshard");
  } catch (const titan::Error&) {
    return 0;  // the header is refused: so would the file be
  }
  static const std::string path = "/tmp/titan_shard_fuzz_" + std::to_string(::getpid()) + ".tshard";
  if (FILE* file = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, file);
    std::fclose(file);
  }
  try {
    titan::data::MappedShard shard(path);
    uint64_t total = 0;
    for (uint64_t d = 0; d < shard.num_documents(); ++d) {
      total += shard.document(d).size();
      if (shard.has_loss_mask() && shard.loss_mask(d).size() != shard.document(d).size()) std::abort();
    }
    if (total != shard.num_tokens()) std::abort();
  } catch (const titan::Error&) {
  }
  return 0;
}
