#include "titan/checkpoint/zip_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "titan/checkpoint/zip_crc32.h"
#include "titan/checkpoint/zip_format.h"
#include "titan/core/error.h"

namespace titan::checkpoint {

namespace {

using namespace zip_format;
constexpr uint64_t kMaxTail = 65535 + kEndOfDirectoryBytes + 20 + 56;

uint64_t zip_little_endian(std::string_view bytes, size_t at, size_t count) {
  uint64_t value = 0;
  for (size_t i = 0; i < count; ++i) value |= uint64_t{static_cast<uint8_t>(bytes[at + i])} << (8 * i);
  return value;
}

// A cursor over a byte range whose every read is bounds-checked.
struct Cursor {
  std::string_view bytes;
  size_t at = 0;
  const std::string& source;
  const char* what;
  uint64_t take(size_t count) {
    TITAN_CHECK(count <= bytes.size() - std::min(at, bytes.size()) && at <= bytes.size(),
                "{}: zip {} ends early (truncated or not a zip archive)", source, what);
    const uint64_t value = zip_little_endian(bytes, at, count);
    at += count;
    return value;
  }
  std::string_view skip(size_t count) {
    TITAN_CHECK(at <= bytes.size() && count <= bytes.size() - at, "{}: zip {} ends early (truncated?)", source, what);
    const std::string_view out = bytes.substr(at, count);
    at += count;
    return out;
  }
};

}  // namespace

ZipDirectoryPlace find_zip_directory(std::string_view tail, uint64_t tail_offset, uint64_t archive_size,
                                     const std::string& source) {
  TITAN_CHECK(
      tail.size() >= kEndOfDirectoryBytes && tail_offset <= archive_size && tail.size() == archive_size - tail_offset,
      "{}: too short to be a zip archive ({} bytes)", source, archive_size);
  // The end-of-directory record is the last one whose comment runs exactly to the end.
  size_t end_record = std::string_view::npos;
  for (size_t at = tail.size() - kEndOfDirectoryBytes + 1; at-- > 0;) {
    if (zip_little_endian(tail, at, 4) == kEndOfDirectory &&
        at + kEndOfDirectoryBytes + zip_little_endian(tail, at + 20, 2) == tail.size()) {
      end_record = at;
      break;
    }
  }
  TITAN_CHECK(end_record != std::string_view::npos,
              "{}: no zip end-of-directory record (not a torch.save zip archive, truncated, or an old-format "
              "torch.save file, which titan does not read)",
              source);
  ZipDirectoryPlace place;
  place.entries = zip_little_endian(tail, end_record + 10, 2);
  place.size = zip_little_endian(tail, end_record + 12, 4);
  place.offset = zip_little_endian(tail, end_record + 16, 4);
  if (end_record >= 20 && zip_little_endian(tail, end_record - 20, 4) == kZip64Locator) {
    const uint64_t record = zip_little_endian(tail, end_record - 20 + 8, 8);
    TITAN_CHECK(record >= tail_offset && record - tail_offset <= end_record - 20 &&
                    end_record - 20 - (record - tail_offset) >= 56,
                "{}: the zip64 end-of-directory record is out of place", source);
    const size_t at = static_cast<size_t>(record - tail_offset);
    TITAN_CHECK(zip_little_endian(tail, at, 4) == kZip64EndOfDirectory, "{}: bad zip64 end-of-directory record",
                source);
    place.entries = zip_little_endian(tail, at + 32, 8);
    place.size = zip_little_endian(tail, at + 40, 8);
    place.offset = zip_little_endian(tail, at + 48, 8);
  }
  TITAN_CHECK(place.offset <= archive_size && place.size <= archive_size - place.offset,
              "{}: the zip central directory (offset {}, {} bytes) lies outside the archive", source, place.offset,
              place.size);
  TITAN_CHECK(place.entries <= place.size / 46, "{}: the zip directory claims {} entries in {} bytes", source,
              place.entries, place.size);
  return place;
}

std::vector<ZipMember> parse_zip_directory(std::string_view directory, const ZipDirectoryPlace& place,
                                           uint64_t archive_size, uint64_t archive_offset, const std::string& source) {
  TITAN_CHECK(directory.size() == place.size, "{}: the zip directory read is {} bytes, not {}", source,
              directory.size(), place.size);
  Cursor cursor{directory, 0, source, "central directory"};
  const uint64_t entries = place.entries;
  std::vector<ZipMember> members;
  members.reserve(static_cast<size_t>(entries));
  for (uint64_t i = 0; i < entries; ++i) {
    TITAN_CHECK(cursor.take(4) == kCentralHeader, "{}: zip directory entry {} is malformed", source, i);
    cursor.skip(4);  // versions
    const uint64_t flags = cursor.take(2);
    const uint64_t method = cursor.take(2);
    cursor.skip(4);  // time, date
    ZipMember member;
    member.crc32 = static_cast<uint32_t>(cursor.take(4));
    uint64_t compressed = cursor.take(4);
    uint64_t size = cursor.take(4);
    const size_t name_bytes = cursor.take(2), extra_bytes = cursor.take(2), comment_bytes = cursor.take(2);
    cursor.skip(8);  // disk, attributes
    uint64_t local = cursor.take(4);
    member.name = std::string(cursor.skip(name_bytes));
    Cursor extra{cursor.skip(extra_bytes), 0, source, "extra field"};
    cursor.skip(comment_bytes);
    while (extra.at + 4 <= extra.bytes.size()) {
      const uint64_t id = extra.take(2), bytes = extra.take(2);
      Cursor field{extra.skip(bytes), 0, source, "zip64 field"};
      if (id != kZip64Extra) continue;
      if (size == kDeferredTo64) size = field.take(8);
      if (compressed == kDeferredTo64) compressed = field.take(8);
      if (local == kDeferredTo64) local = field.take(8);
    }
    TITAN_CHECK(method == 0 && compressed == size && (flags & 1) == 0,
                "{}: zip member '{}' is compressed or encrypted (torch.save stores members uncompressed)", source,
                member.name);
    TITAN_CHECK(local < archive_size && size <= archive_size, "{}: zip member '{}' lies outside the archive", source,
                member.name);
    member.local_header = archive_offset + local;
    member.size = size;
    members.push_back(std::move(member));
  }
  return members;
}

ZipReader::ZipReader(std::string path, uint64_t offset, uint64_t length) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  TITAN_CHECK(fd_ >= 0, "cannot open '{}': {}", path_, std::strerror(errno));
  struct stat info {};
  TITAN_CHECK(::fstat(fd_, &info) == 0, "cannot stat '{}'", path_);
  const auto file_size = static_cast<uint64_t>(info.st_size);
  TITAN_CHECK(offset <= file_size && length <= file_size - offset,
              "{}: the archive at byte {} ({} bytes) lies past "
              "the end of the file ({} bytes)",
              path_, offset, length, file_size);
  const uint64_t archive_size = length == 0 ? file_size - offset : length;
  const uint64_t tail_size = std::min(archive_size, kMaxTail);
  std::string tail(static_cast<size_t>(tail_size), '\0');
  read_at(offset + archive_size - tail_size, tail_size, tail.data());
  const ZipDirectoryPlace place = find_zip_directory(tail, archive_size - tail_size, archive_size, path_);
  std::string directory(static_cast<size_t>(place.size), '\0');
  read_at(offset + place.offset, place.size, directory.data());
  std::vector<ZipMember> members = parse_zip_directory(directory, place, archive_size, offset, path_);
  for (ZipMember& member : members) {
    char header[kLocalHeaderBytes];
    TITAN_CHECK(member.local_header + kLocalHeaderBytes <= offset + archive_size,
                "{}: zip member '{}' has its header past the archive's end", path_, member.name);
    read_at(member.local_header, kLocalHeaderBytes, header);
    const std::string_view view(header, kLocalHeaderBytes);
    TITAN_CHECK(zip_little_endian(view, 0, 4) == kLocalHeader,
                "{}: zip member '{}' has no local header where the "
                "directory says",
                path_, member.name);
    member.begin =
        member.local_header + kLocalHeaderBytes + zip_little_endian(view, 26, 2) + zip_little_endian(view, 28, 2);
    TITAN_CHECK(member.begin <= offset + archive_size && member.size <= offset + archive_size - member.begin,
                "{}: zip member '{}' ({} bytes) runs past the archive's end", path_, member.name, member.size);
    TITAN_CHECK(by_name_.emplace(member.name, members_.size()).second, "{}: zip member '{}' appears twice", path_,
                member.name);
    members_.push_back(member);
  }
}

ZipReader::~ZipReader() {
  if (fd_ >= 0) ::close(fd_);
}

const ZipMember* ZipReader::find(std::string_view name) const {
  const auto found = by_name_.find(name);
  return found == by_name_.end() ? nullptr : &members_[found->second];
}

std::string ZipReader::read(const ZipMember& member) const {
  std::string bytes(static_cast<size_t>(member.size), '\0');
  read_at(member.begin, member.size, bytes.data());
  TITAN_CHECK(zip_crc32(bytes.data(), bytes.size()) == member.crc32,
              "{}: zip member '{}' fails its CRC-32 check (corrupt file)", path_, member.name);
  return bytes;
}

void ZipReader::read_at(uint64_t begin, uint64_t size, void* destination) const {
  auto* out = static_cast<char*>(destination);
  while (size > 0) {
    const ssize_t got = ::pread(fd_, out, size, static_cast<off_t>(begin));
    TITAN_CHECK(got > 0, "{}: cannot read {} bytes at {} (file truncated?)", path_, size, begin);
    out += got;
    begin += static_cast<uint64_t>(got);
    size -= static_cast<uint64_t>(got);
  }
}

}  // namespace titan::checkpoint
