// libFuzzer entry point: the restricted unpickler (PyTorch .pth / .bin data.pkl,
// DCP .metadata). Any input is either refused with titan::Error or yields a
// value graph that can be walked (bounded: it may refer to itself); globals
// are accepted only from the one module the filter names, so refusals are fuzzed too.
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "titan/checkpoint/pickle_reader.h"
#include "titan/core/error.h"

namespace {

using titan::checkpoint::PickleValue;

// Walks the graph (bounded: a pickle may refer to itself) touching every value.
size_t walk(const PickleValue* value, int depth, std::set<const PickleValue*>& seen) {
  if (value == nullptr || depth > 64 || !seen.insert(value).second) return 0;
  size_t count = value->describe().size() > 0 ? 1 : 0;
  for (const PickleValue* item : value->items) count += walk(item, depth + 1, seen);
  for (const auto& [key, item] : value->entries) count += walk(key, depth + 1, seen) + walk(item, depth + 1, seen);
  count += walk(value->callable, depth + 1, seen) + walk(value->arguments, depth + 1, seen) +
           walk(value->state, depth + 1, seen);
  return count;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  titan::checkpoint::Pickle pickle;
  try {
    pickle = titan::checkpoint::read_pickle(
        bytes, [](const std::string& module, const std::string&) { return module == "torch._utils"; }, "fuzz.pkl");
  } catch (const titan::Error&) {
    return 0;
  }
  if (pickle.root == nullptr) std::abort();
  std::set<const PickleValue*> seen;
  if (walk(pickle.root, 0, seen) == 0) std::abort();
  return 0;
}
