#include "titan/checkpoint/pickle_writer.h"

#include <bit>
#include <cstring>

#include "titan/core/error.h"

namespace titan::checkpoint {

// The opcodes, as Python's pickletools names them.
namespace pickle_writer_opcodes {
constexpr uint8_t kProto = 0x80, kStop = '.', kNone = 'N', kNewTrue = 0x88, kNewFalse = 0x89;
constexpr uint8_t kBinInt1 = 'K', kBinInt2 = 'M', kBinInt = 'J', kLong1 = 0x8a, kBinFloat = 'G';
constexpr uint8_t kBinUnicode = 'X', kBinBytes = 'B', kShortBinBytes = 'C', kGlobal = 'c';
constexpr uint8_t kMark = '(', kTuple = 't', kEmptyTuple = ')', kEmptyDict = '}', kSetItems = 'u';
constexpr uint8_t kEmptyList = ']', kAppends = 'e', kReduce = 'R', kNewObj = 0x81, kBuild = 'b';
constexpr uint8_t kBinPersId = 'Q';
}  // namespace pickle_writer_opcodes

namespace po = pickle_writer_opcodes;

PickleWriter::PickleWriter() {
  op(po::kProto);
  op(2);
}

void PickleWriter::little_endian(uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

PickleWriter& PickleWriter::none() {
  op(po::kNone);
  return *this;
}

PickleWriter& PickleWriter::boolean(bool value) {
  op(value ? po::kNewTrue : po::kNewFalse);
  return *this;
}

PickleWriter& PickleWriter::integer(int64_t value) {
  // The shortest form Python's pickler picks: unsigned 1 and 2 bytes, signed
  // 4 bytes, else LONG1 with the fewest two's-complement bytes.
  if (value >= 0 && value <= 0xff) {
    op(po::kBinInt1);
    little_endian(static_cast<uint64_t>(value), 1);
  } else if (value >= 0 && value <= 0xffff) {
    op(po::kBinInt2);
    little_endian(static_cast<uint64_t>(value), 2);
  } else if (value >= INT32_MIN && value <= INT32_MAX) {
    op(po::kBinInt);
    little_endian(static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(value))), 4);
  } else {
    int bytes = 8;
    // Drop top bytes while the next one down still carries the sign.
    while (bytes > 1) {
      const int64_t top = value >> (8 * (bytes - 1));
      const bool next_negative = ((value >> (8 * (bytes - 2))) & 0x80) != 0;
      if ((top == 0 && !next_negative) || (top == -1 && next_negative)) {
        --bytes;
      } else {
        break;
      }
    }
    op(po::kLong1);
    little_endian(static_cast<uint64_t>(bytes), 1);
    little_endian(static_cast<uint64_t>(value), bytes);
  }
  return *this;
}

PickleWriter& PickleWriter::floating(double value) {
  op(po::kBinFloat);
  const auto bits = std::bit_cast<uint64_t>(value);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));  // big-endian
  return *this;
}

PickleWriter& PickleWriter::text(std::string_view utf8) {
  TITAN_CHECK(utf8.size() <= 0xffffffffu, "pickle writer: a string of {} bytes is past protocol 2's limit",
              utf8.size());
  op(po::kBinUnicode);
  little_endian(utf8.size(), 4);
  out_.append(utf8);
  return *this;
}

PickleWriter& PickleWriter::bytes(std::string_view data) {
  TITAN_CHECK(data.size() <= 0xffffffffu, "pickle writer: {} bytes are past BINBYTES' limit", data.size());
  if (data.size() < 256) {
    op(po::kShortBinBytes);
    little_endian(data.size(), 1);
  } else {
    op(po::kBinBytes);
    little_endian(data.size(), 4);
  }
  out_.append(data);
  return *this;
}

PickleWriter& PickleWriter::global(std::string_view module, std::string_view name) {
  TITAN_CHECK(module.find('\n') == std::string_view::npos && name.find('\n') == std::string_view::npos,
              "pickle writer: a global's name may not hold a newline ('{}.{}')", module, name);
  op(po::kGlobal);
  out_.append(module);
  out_.push_back('\n');
  out_.append(name);
  out_.push_back('\n');
  return *this;
}

PickleWriter& PickleWriter::mark() {
  op(po::kMark);
  return *this;
}
PickleWriter& PickleWriter::tuple() {
  op(po::kTuple);
  return *this;
}
PickleWriter& PickleWriter::empty_tuple() {
  op(po::kEmptyTuple);
  return *this;
}
PickleWriter& PickleWriter::empty_dict() {
  op(po::kEmptyDict);
  return *this;
}
PickleWriter& PickleWriter::set_items() {
  op(po::kSetItems);
  return *this;
}
PickleWriter& PickleWriter::empty_list() {
  op(po::kEmptyList);
  return *this;
}
PickleWriter& PickleWriter::append_items() {
  op(po::kAppends);
  return *this;
}
PickleWriter& PickleWriter::reduce() {
  op(po::kReduce);
  return *this;
}
PickleWriter& PickleWriter::new_object() {
  op(po::kNewObj);
  return *this;
}
PickleWriter& PickleWriter::build() {
  op(po::kBuild);
  return *this;
}
PickleWriter& PickleWriter::persistent_id() {
  op(po::kBinPersId);
  return *this;
}

std::string PickleWriter::finish() {
  TITAN_CHECK(!finished_, "pickle writer: finish() called twice");
  finished_ = true;
  op(po::kStop);
  return std::move(out_);
}

}  // namespace titan::checkpoint
