// libFuzzer entry point: the zip end-of-directory records and central
// directory of torch.save archives. Any input is either refused with
// titan::Error or lists members whose headers and sizes lie inside the archive.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "titan/checkpoint/zip_reader.h"
#include "titan/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view archive(reinterpret_cast<const char*>(data), size);
  try {
    const auto place = titan::checkpoint::find_zip_directory(archive, 0, size, "fuzz.zip");
    if (place.offset > size || place.size > size - place.offset) std::abort();
    const auto members =
        titan::checkpoint::parse_zip_directory(archive.substr(place.offset, place.size), place, size, 100, "fuzz.zip");
    for (const auto& member : members) {
      if (member.local_header < 100 || member.local_header - 100 >= size || member.size > size) std::abort();
    }
  } catch (const titan::Error&) {
  }
  return 0;
}
