#include "titan/train/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "titan/checkpoint/crc32c.h"
#include "titan/core/error.h"

namespace titan::train {

namespace {

// Protocol buffer wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// Field numbers of tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto (the published schema).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2, kValueImage = 4;
constexpr uint32_t kImageHeight = 1, kImageWidth = 2, kImageColorspace = 3, kImageEncoded = 4;
constexpr int64_t kColorspaceRgb = 3;

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

// Little-endian, whatever the host's byte order.
void put_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void put_double(std::string& out, uint32_t field, double value) {
  put_key(out, field, kFixed64);
  put_little_endian(out, std::bit_cast<uint64_t>(value), 8);
}

void put_float(std::string& out, uint32_t field, float value) {
  put_key(out, field, kFixed32);
  put_little_endian(out, std::bit_cast<uint32_t>(value), 4);
}

// int64 fields are varints of the two's complement (ten bytes when negative).
void put_int64(std::string& out, uint32_t field, int64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(value));
}

// Strings and embedded messages alike: a length, then the bytes.
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

double wall_time_now() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_epoch).count();
}

// The TFRecord checksum: CRC-32C rotated and offset, so that a CRC computed
// over data that itself holds CRCs does not degenerate.
uint32_t masked_crc(std::string_view bytes) {
  const uint32_t crc = checkpoint::crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  put_little_endian(length, data.size(), 8);
  std::string record = length;
  put_little_endian(record, masked_crc(length), 4);
  record.append(data);
  put_little_endian(record, masked_crc(data), 4);
  return record;
}

std::string summary_value(const std::string& tag, double value) {
  std::string encoded;
  put_bytes(encoded, kValueTag, tag);
  put_float(encoded, kValueSimpleValue, static_cast<float>(value));
  return encoded;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& folder) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  TITAN_CHECK(!error, "cannot create the TensorBoard folder '{}': {}", folder, error.message());
  const double wall_time = wall_time_now();
  const std::string base = (std::filesystem::path(folder) /
                            fmt::format("events.out.tfevents.{}.{}", static_cast<int64_t>(wall_time), host_name()))
                               .string();
  // A second writer in the same second (a restarted job) gets a suffix rather than overwriting the first's events.
  for (int attempt = 0; fd_ < 0; ++attempt) {
    path_ = attempt == 0 ? base : fmt::format("{}.{}", base, attempt);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    TITAN_CHECK(fd_ >= 0 || (errno == EEXIST && attempt < 100), "cannot create TensorBoard event file '{}': {}", path_,
                std::strerror(errno));
  }
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_bytes(event, kEventFileVersion, "brain.Event:2");
  write_event(event);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::add_scalars(int64_t step, const nlohmann::json& record) {
  std::string summary;
  for (const auto& [key, value] : record.items()) {
    if (key == "step") continue;
    // is_number() is false for booleans, so flags never become scalars.
    if (value.is_number()) {
      put_bytes(summary, kSummaryValue, summary_value(key, value.get<double>()));
    } else if (value.is_array()) {
      for (size_t i = 0; i < value.size(); ++i) {
        if (value[i].is_number()) {
          put_bytes(summary, kSummaryValue, summary_value(fmt::format("{}/{}", key, i), value[i].get<double>()));
        }
      }
    }
  }
  std::string event;
  put_double(event, kEventWallTime, wall_time_now());
  put_int64(event, kEventStep, step);
  put_bytes(event, kEventSummary, summary);
  write_event(event);
}

void TensorBoardWriter::add_image(int64_t step, const std::string& tag, int64_t height, int64_t width,
                                  std::string_view png) {
  std::string image;
  put_int64(image, kImageHeight, height);
  put_int64(image, kImageWidth, width);
  put_int64(image, kImageColorspace, kColorspaceRgb);
  put_bytes(image, kImageEncoded, png);
  std::string value;
  put_bytes(value, kValueTag, tag);
  put_bytes(value, kValueImage, image);
  std::string summary;
  put_bytes(summary, kSummaryValue, value);
  std::string event;
  put_double(event, kEventWallTime, wall_time_now());
  put_int64(event, kEventStep, step);
  put_bytes(event, kEventSummary, summary);
  write_event(event);
}

void TensorBoardWriter::write_event(const std::string& event) {
  // One write per record, with no buffer in this process: a reader (TensorBoard
  // polling the folder) sees each event as soon as it is logged.
  const std::string record = tfrecord(event);
  const off_t size_before = ::lseek(fd_, 0, SEEK_END);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      // A half-written record would end every reader at this point: cut it off (best effort).
      if (size_before >= 0 && done > 0) {
        [[maybe_unused]] const int cut = ::ftruncate(fd_, size_before);
      }
      fail("cannot write TensorBoard event file '{}': {}", path_, std::strerror(error));
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace titan::train
