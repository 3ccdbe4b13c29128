// Writes a zip archive of stored (uncompressed) members, as torch.save
// writes its archives: each member's data starts on a 64-byte boundary
// (padding in the local header's extra field), so a reader can map
// tensors in place. Sizes and offsets past 4 GiB switch to zip64 records.
// The archive may be written into the middle of a larger stream (a DCP
// .distcp file holds one archive per tensor): offsets count from the
// archive's first byte, as PyTorch's own writer counts them.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace titan::checkpoint {

class ZipWriter {
 public:
  // `source` names the file in errors.
  ZipWriter(std::ostream& out, std::string source);
  // A member holding [data, data + size).
  void add(std::string_view name, const void* data, uint64_t size);
  // Writes the central directory; returns the archive's size in bytes.
  uint64_t finish();

 private:
  struct Entry {
    std::string name;
    uint64_t header_offset = 0, size = 0;
    uint32_t crc32 = 0;
  };
  void write(const void* data, uint64_t size);
  std::ostream& out_;
  std::string source_;
  uint64_t position_ = 0;  // bytes written since the archive began
  std::vector<Entry> entries_;
  bool finished_ = false;
};

// The alignment PyTorch gives every member's data.
inline constexpr uint64_t kZipDataAlignment = 64;

}  // namespace titan::checkpoint
