#include "titan/checkpoint/zip_writer.h"

#include "titan/checkpoint/zip_crc32.h"
#include "titan/checkpoint/zip_format.h"
#include "titan/core/error.h"

namespace titan::checkpoint {

namespace zip_writer_detail {

using namespace zip_format;
constexpr uint64_t k32 = kDeferredTo64;
constexpr uint16_t kPaddingExtra = 0x4246;  // "FB": the id PyTorch's padding uses
constexpr uint16_t kVersionStored = 20, kVersionZip64 = 45;

struct Bytes {
  std::string data;
  void u16(uint64_t v) { put(v, 2); }
  void u32(uint64_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) data.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
};

}  // namespace zip_writer_detail

namespace zw = zip_writer_detail;

ZipWriter::ZipWriter(std::ostream& out, std::string source) : out_(out), source_(std::move(source)) {}

void ZipWriter::write(const void* data, uint64_t size) {
  out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  TITAN_CHECK(out_.good(), "{}: write failed (disk full?)", source_);
  position_ += size;
}

void ZipWriter::add(std::string_view name, const void* data, uint64_t size) {
  TITAN_CHECK(!finished_, "{}: zip member '{}' added after the archive was finished", source_, name);
  TITAN_CHECK(!name.empty() && name.size() < 0xffff, "{}: zip member name '{}' is empty or too long", source_, name);
  Entry entry{std::string(name), position_, size, zip_crc32(data, size)};
  const bool zip64 = size >= zw::k32;
  zw::Bytes header;
  header.u32(zw::kLocalHeader);
  header.u16(zip64 ? zw::kVersionZip64 : zw::kVersionStored);
  header.u16(0);  // flags
  header.u16(0);  // stored
  header.u16(0);  // time
  header.u16(0);  // date
  header.u32(entry.crc32);
  header.u32(zip64 ? zw::k32 : size);
  header.u32(zip64 ? zw::k32 : size);
  header.u16(name.size());
  zw::Bytes extra;
  if (zip64) {
    extra.u16(zw::kZip64Extra);
    extra.u16(16);
    extra.u64(size);
    extra.u64(size);
  }
  // Padding so the data starts on the alignment: an extra field of its own
  // (4 bytes of id and length at least).
  const uint64_t unpadded = position_ + 30 + name.size() + extra.data.size();
  if (unpadded % kZipDataAlignment != 0) {
    uint64_t pad = kZipDataAlignment - unpadded % kZipDataAlignment;
    if (pad < 4) pad += kZipDataAlignment;
    extra.u16(zw::kPaddingExtra);
    extra.u16(pad - 4);
    extra.data.append(pad - 4, 'Z');
  }
  header.u16(extra.data.size());
  header.data.append(name);
  header.data.append(extra.data);
  write(header.data.data(), header.data.size());
  write(data, size);
  entries_.push_back(std::move(entry));
}

uint64_t ZipWriter::finish() {
  TITAN_CHECK(!finished_, "{}: zip archive finished twice", source_);
  finished_ = true;
  const uint64_t directory_offset = position_;
  for (const Entry& entry : entries_) {
    const bool big_size = entry.size >= zw::k32, big_offset = entry.header_offset >= zw::k32;
    zw::Bytes extra;
    if (big_size || big_offset) {
      extra.u16(zw::kZip64Extra);
      extra.u16((big_size ? 16 : 0) + (big_offset ? 8 : 0));
      if (big_size) {
        extra.u64(entry.size);  // uncompressed, then compressed: the order zip64 prescribes
        extra.u64(entry.size);
      }
      if (big_offset) extra.u64(entry.header_offset);
    }
    zw::Bytes header;
    header.u32(zw::kCentralHeader);
    header.u16(big_size || big_offset ? zw::kVersionZip64 : zw::kVersionStored);  // made by
    header.u16(big_size || big_offset ? zw::kVersionZip64 : zw::kVersionStored);  // needed
    header.u16(0);
    header.u16(0);
    header.u16(0);
    header.u16(0);
    header.u32(entry.crc32);
    header.u32(big_size ? zw::k32 : entry.size);
    header.u32(big_size ? zw::k32 : entry.size);
    header.u16(entry.name.size());
    header.u16(extra.data.size());
    header.u16(0);  // comment
    header.u16(0);  // disk
    header.u16(0);  // internal attributes
    header.u32(0);  // external attributes
    header.u32(big_offset ? zw::k32 : entry.header_offset);
    header.data.append(entry.name);
    header.data.append(extra.data);
    write(header.data.data(), header.data.size());
  }
  const uint64_t directory_size = position_ - directory_offset;
  const uint64_t count = entries_.size();
  zw::Bytes end;
  if (count >= 0xffff || directory_offset >= zw::k32 || directory_size >= zw::k32) {
    const uint64_t zip64_end = position_;
    end.u32(zw::kZip64EndOfDirectory);
    end.u64(44);  // the record's size after this field
    end.u16(zw::kVersionZip64);
    end.u16(zw::kVersionZip64);
    end.u32(0);
    end.u32(0);
    end.u64(count);
    end.u64(count);
    end.u64(directory_size);
    end.u64(directory_offset);
    end.u32(zw::kZip64Locator);
    end.u32(0);
    end.u64(zip64_end);
    end.u32(1);
  }
  end.u32(zw::kEndOfDirectory);
  end.u16(0);
  end.u16(0);
  end.u16(count >= 0xffff ? 0xffff : count);
  end.u16(count >= 0xffff ? 0xffff : count);
  end.u32(directory_size >= zw::k32 ? zw::k32 : directory_size);
  end.u32(directory_offset >= zw::k32 ? zw::k32 : directory_offset);
  end.u16(0);  // comment
  write(end.data.data(), end.data.size());
  out_.flush();
  TITAN_CHECK(out_.good(), "{}: write failed (disk full?)", source_);
  return position_;
}

}  // namespace titan::checkpoint
