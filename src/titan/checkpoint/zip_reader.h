// Reads the members of a zip archive that are stored uncompressed, as
// torch.save writes them. The archive may sit inside a larger file (a DCP
// .distcp holds one torch.save archive per tensor): offsets in it count from
// its first byte. Members are found by the central directory (zip64
// included); every offset and size is checked against the archive's bounds,
// and errors name the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace titan::checkpoint {

struct ZipMember {
  std::string name;
  uint64_t local_header = 0;  // absolute in the file
  uint64_t begin = 0;         // the data's first byte, absolute in the file (past the local header)
  uint64_t size = 0;
  uint32_t crc32 = 0;
};

// Where the central directory is: found from the end-of-directory record
// (and the zip64 one) at the end of `tail`, the last bytes of an archive of
// `archive_size` bytes, starting at `tail_offset` within it.
struct ZipDirectoryPlace {
  uint64_t offset = 0, size = 0, entries = 0;
};
ZipDirectoryPlace find_zip_directory(std::string_view tail, uint64_t tail_offset, uint64_t archive_size,
                                     const std::string& source);
// The members listed in `directory` (the bytes at `place`), of an archive at
// `archive_offset` of `source`. Only `local_header`, `size` and `crc32` are
// filled: ZipReader reads each local header for `begin`. Apart from the file
// I/O so both can be fuzzed.
std::vector<ZipMember> parse_zip_directory(std::string_view directory, const ZipDirectoryPlace& place,
                                           uint64_t archive_size, uint64_t archive_offset, const std::string& source);

class ZipReader {
 public:
  // The archive at [offset, offset + length) of `path`; length 0: to the end of the file.
  explicit ZipReader(std::string path, uint64_t offset = 0, uint64_t length = 0);
  ~ZipReader();
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;
  const std::string& path() const { return path_; }
  const std::vector<ZipMember>& members() const { return members_; }
  const ZipMember* find(std::string_view name) const;
  // A member's bytes, checked against its CRC-32 (for small members such as data.pkl).
  std::string read(const ZipMember& member) const;
  // Bytes [begin, begin + size) of the file (absolute).
  void read_at(uint64_t begin, uint64_t size, void* destination) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<ZipMember> members_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

}  // namespace titan::checkpoint
