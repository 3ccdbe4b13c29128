#include "titan/data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "titan/core/error.h"
#include "titan/data/file_io.h"
#include "titan/data/hashing.h"

namespace titan::data {
namespace {

// Field offsets in the 64-byte header. The flags (version 2) sit in what was
// padding in version 1, inside the bytes the header checksum covers.
constexpr size_t kVersionAt = 8, kHeaderSizeAt = 12, kTokensAt = 16, kDocumentsAt = 24, kVocabAt = 32, kFlagsAt = 36,
                 kPayloadSumAt = 40, kHeaderSumAt = 48;
constexpr uint64_t kMaxCount = uint64_t{1} << 50;  // far beyond any disk; keeps size arithmetic exact

template <typename T>
T load(const uint8_t* bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes + at, sizeof(T));
  return value;
}
template <typename T>
void store(uint8_t* bytes, size_t at, T value) {
  std::memcpy(bytes + at, &value, sizeof(T));
}

// Checksum of the tokens, the document table and the loss mask (when there
// is one: without it the sum is version 1's).
uint64_t payload_checksum(const uint32_t* tokens, uint64_t num_tokens, const uint64_t* ends, uint64_t num_documents,
                          bool has_mask, const uint8_t* mask) {
  const uint64_t a = hash_bytes(tokens, num_tokens * 4, 0x746F6B656E73ull);
  const uint64_t b = hash_bytes(ends, num_documents * 8, 0x656E6473ull);
  const uint64_t sum = hash_mix(a ^ (b * 0x9E3779B97F4A7C15ull));
  if (!has_mask) return sum;
  return hash_mix(sum ^ (hash_bytes(mask, num_tokens, 0x6D61736Bull) * 0xC2B2AE3D27D4EB4Full));
}

}  // namespace

ShardHeader parse_shard_header(std::span<const uint8_t> bytes, uint64_t file_size, std::string_view source) {
  TITAN_CHECK(bytes.size() >= ShardHeader::kSize && file_size >= ShardHeader::kSize,
              "{}: not a token shard: {} bytes is shorter than the {}-byte header (truncated?)", source, file_size,
              ShardHeader::kSize);
  const uint8_t* h = bytes.data();
  TITAN_CHECK(std::memcmp(h, ShardHeader::kMagic, 8) == 0, "{}: not a token shard (bad magic)", source);
  const auto version = load<uint32_t>(h, kVersionAt);
  TITAN_CHECK(version >= 1 && version <= ShardHeader::kVersion,
              "{}: token shard version {} is not supported (this build reads 1 to {})", source, version,
              ShardHeader::kVersion);
  TITAN_CHECK(load<uint32_t>(h, kHeaderSizeAt) == ShardHeader::kSize, "{}: bad token shard header size", source);
  TITAN_CHECK(load<uint64_t>(h, kHeaderSumAt) == hash_bytes(h, kHeaderSumAt),
              "{}: token shard header checksum mismatch (corrupted file)", source);
  ShardHeader header;
  header.version = version;
  header.flags = load<uint32_t>(h, kFlagsAt);
  TITAN_CHECK(header.flags == 0 || (version >= 2 && (header.flags & ~ShardHeader::kFlagLossMask) == 0),
              "{}: token shard version {} has unknown flags {:#x} (corrupted file, or written by a newer titan)",
              source, version, header.flags);
  header.num_tokens = load<uint64_t>(h, kTokensAt);
  header.num_documents = load<uint64_t>(h, kDocumentsAt);
  header.vocab_size = load<uint32_t>(h, kVocabAt);
  header.payload_checksum = load<uint64_t>(h, kPayloadSumAt);
  TITAN_CHECK(header.num_tokens < kMaxCount && header.num_documents < kMaxCount,
              "{}: token shard counts are out of range (corrupted file)", source);
  TITAN_CHECK(header.vocab_size > 0, "{}: token shard has vocabulary size 0", source);
  TITAN_CHECK(file_size == header.file_size(),
              "{}: token shard is {} bytes but its header describes {} ({} tokens, {} documents{}): truncated or "
              "corrupted",
              source, file_size, header.file_size(), header.num_tokens, header.num_documents,
              header.has_loss_mask() ? ", a loss mask" : "");
  return header;
}

void ShardWriter::add_document(std::span<const uint32_t> tokens) {
  TITAN_CHECK(!with_mask_, "token shard: this shard carries a loss mask, and the document gives none");
  for (uint32_t token : tokens) {
    TITAN_CHECK(token < vocab_size_, "token shard: token {} is outside the vocabulary of {}", token, vocab_size_);
  }
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  ends_.push_back(tokens_.size());
}

void ShardWriter::add_document(std::span<const uint32_t> tokens, std::span<const uint8_t> mask) {
  TITAN_CHECK(with_mask_, "token shard: a loss mask given to a shard without one");
  TITAN_CHECK(mask.size() == tokens.size(), "token shard: {} mask bytes for {} tokens", mask.size(), tokens.size());
  for (uint8_t bit : mask) TITAN_CHECK(bit <= 1, "token shard: loss mask byte {} is not 0 or 1", bit);
  for (uint32_t token : tokens) {
    TITAN_CHECK(token < vocab_size_, "token shard: token {} is outside the vocabulary of {}", token, vocab_size_);
  }
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  mask_.insert(mask_.end(), mask.begin(), mask.end());
  ends_.push_back(tokens_.size());
}

void ShardWriter::write(const std::filesystem::path& path) {
  ShardHeader header;
  header.num_tokens = tokens_.size();
  header.num_documents = ends_.size();
  header.vocab_size = vocab_size_;
  header.flags = with_mask_ ? ShardHeader::kFlagLossMask : 0;
  std::string bytes(header.file_size(), '\0');
  auto* out = reinterpret_cast<uint8_t*>(bytes.data());
  std::memcpy(out, ShardHeader::kMagic, 8);
  store<uint32_t>(out, kVersionAt, with_mask_ ? ShardHeader::kVersion : 1);
  store<uint32_t>(out, kFlagsAt, header.flags);
  store<uint32_t>(out, kHeaderSizeAt, ShardHeader::kSize);
  store<uint64_t>(out, kTokensAt, header.num_tokens);
  store<uint64_t>(out, kDocumentsAt, header.num_documents);
  store<uint32_t>(out, kVocabAt, vocab_size_);
  store<uint64_t>(
      out, kPayloadSumAt,
      payload_checksum(tokens_.data(), tokens_.size(), ends_.data(), ends_.size(), with_mask_, mask_.data()));
  store<uint64_t>(out, kHeaderSumAt, hash_bytes(out, kHeaderSumAt));
  if (!tokens_.empty()) std::memcpy(out + ShardHeader::kSize, tokens_.data(), tokens_.size() * 4);
  if (!ends_.empty()) std::memcpy(out + header.ends_offset(), ends_.data(), ends_.size() * 8);
  if (!mask_.empty()) std::memcpy(out + header.mask_offset(), mask_.data(), mask_.size());
  write_file_atomic(path, bytes);
  tokens_.clear();
  ends_.clear();
  mask_.clear();
}

MappedShard::MappedShard(const std::filesystem::path& path, bool verify_checksum) : path_(path) {
  const std::string source = path.string();
  const int fd = ::open(source.c_str(), O_RDONLY | O_CLOEXEC);
  TITAN_CHECK(fd >= 0, "token shard {}: cannot open: {}", source, std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    fail("token shard {}: not a regular file", source);
  }
  const auto file_size = static_cast<uint64_t>(info.st_size);
  uint8_t header_bytes[ShardHeader::kSize] = {};
  const ssize_t got = ::pread(fd, header_bytes, sizeof(header_bytes), 0);
  try {
    header_ = parse_shard_header(std::span<const uint8_t>(header_bytes, got > 0 ? static_cast<size_t>(got) : 0),
                                 file_size, source);
  } catch (...) {
    ::close(fd);
    throw;
  }
  mapped_bytes_ = file_size;
  mapping_ = ::mmap(nullptr, mapped_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  TITAN_CHECK(mapping_ != MAP_FAILED, "token shard {}: mmap failed: {}", source, std::strerror(errno));
  const auto* base = static_cast<const uint8_t*>(mapping_);
  tokens_ = reinterpret_cast<const uint32_t*>(base + ShardHeader::kSize);
  ends_ = reinterpret_cast<const uint64_t*>(base + header_.ends_offset());
  if (header_.has_loss_mask()) mask_ = base + header_.mask_offset();
  try {
    uint64_t previous = 0;
    for (uint64_t d = 0; d < header_.num_documents; ++d) {
      TITAN_CHECK(ends_[d] >= previous && ends_[d] <= header_.num_tokens,
                  "token shard {}: document table is corrupted at document {}", source, d);
      previous = ends_[d];
    }
    TITAN_CHECK(previous == header_.num_tokens, "token shard {}: documents cover {} of its {} tokens", source, previous,
                header_.num_tokens);
    if (verify_checksum) {
      TITAN_CHECK(payload_checksum(tokens_, header_.num_tokens, ends_, header_.num_documents, header_.has_loss_mask(),
                                   mask_) == header_.payload_checksum,
                  "token shard {}: checksum mismatch: the tokens are corrupted", source);
      for (uint64_t i = 0; mask_ != nullptr && i < header_.num_tokens; ++i) {
        TITAN_CHECK(mask_[i] <= 1, "token shard {}: loss mask byte {} of token {} is not 0 or 1", source, mask_[i], i);
      }
    }
  } catch (...) {
    ::munmap(mapping_, mapped_bytes_);
    mapping_ = nullptr;
    throw;
  }
}

MappedShard::~MappedShard() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapped_bytes_);
}

std::span<const uint32_t> MappedShard::document(uint64_t index) const {
  TITAN_CHECK(index < header_.num_documents, "token shard {}: document {} of {}", path_.string(), index,
              header_.num_documents);
  const uint64_t begin = index == 0 ? 0 : ends_[index - 1];
  return {tokens_ + begin, static_cast<size_t>(ends_[index] - begin)};
}

std::span<const uint8_t> MappedShard::loss_mask(uint64_t index) const {
  if (mask_ == nullptr) return {};
  TITAN_CHECK(index < header_.num_documents, "token shard {}: document {} of {}", path_.string(), index,
              header_.num_documents);
  const uint64_t begin = index == 0 ? 0 : ends_[index - 1];
  return {mask_ + begin, static_cast<size_t>(ends_[index] - begin)};
}

}  // namespace titan::data
