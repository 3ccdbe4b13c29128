// Token shards: the pre-tokenized dataset files `titan data prepare` writes
// and the loader memory-maps. One shard holds uint32 tokens and the end offset
// of each document, behind a header with a magic, a version and checksums, so
// a truncated or corrupted file is a clear error naming it.
//
// Layout (little-endian):
//   [0, 64)   header: "TITANTOK", version, header size, token count, document
//             count, vocabulary size, flags, payload checksum, header checksum
//   [64, 64 + 4 * tokens)               uint32 tokens, documents back to back
//   (8-byte aligned) + 8 * documents    uint64 end offset of each document
//   then, with the loss-mask flag, tokens bytes: uint8 loss mask per token
//                                       (1: trained on; chat data, see chat_dataset.h)
//
// Version 1 has no flags (the field is zero). Version 2 adds them; a shard
// without a loss mask is still written as version 1, byte for byte what older
// titans wrote and read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

struct ShardHeader {
  static constexpr char kMagic[8] = {'T', 'I', 'T', 'A', 'N', 'T', 'O', 'K'};
  static constexpr uint32_t kVersion = 2;  // the newest this build reads and writes
  static constexpr uint64_t kSize = 64;
  static constexpr uint32_t kFlagLossMask = 1;  // a loss-mask table follows the document table

  uint32_t version = kVersion;
  uint64_t num_tokens = 0;
  uint64_t num_documents = 0;
  uint32_t vocab_size = 0;
  uint32_t flags = 0;
  uint64_t payload_checksum = 0;

  bool has_loss_mask() const { return (flags & kFlagLossMask) != 0; }
  // Byte offsets of the document end table and the loss-mask table, and the
  // file size the header implies.
  uint64_t ends_offset() const { return (kSize + 4 * num_tokens + 7) / 8 * 8; }
  uint64_t mask_offset() const { return ends_offset() + 8 * num_documents; }
  uint64_t file_size() const { return mask_offset() + (has_loss_mask() ? num_tokens : 0); }
};

// Checks and decodes the first bytes of a shard of `file_size` bytes; a
// titan::Error naming `source` on a bad magic, version, checksum or a size
// that does not match (a truncated file).
// The loss-mask table's size is part of the size check, so a shard whose flag
// and length disagree is refused here.
ShardHeader parse_shard_header(std::span<const uint8_t> bytes, uint64_t file_size, std::string_view source);

// Collects documents and writes them as one shard (atomically: a temporary
// file renamed into place).
class ShardWriter {
 public:
  // `loss_mask`: the shard carries a loss mask, and every document gives one.
  explicit ShardWriter(uint32_t vocab_size, bool loss_mask = false) : vocab_size_(vocab_size), with_mask_(loss_mask) {}
  void add_document(std::span<const uint32_t> tokens);
  // `mask`: one 0/1 byte per token (1: trained on); only for a loss-mask writer.
  void add_document(std::span<const uint32_t> tokens, std::span<const uint8_t> mask);
  uint64_t num_tokens() const { return tokens_.size(); }
  uint64_t num_documents() const { return ends_.size(); }
  // Writes the shard and clears the writer.
  void write(const std::filesystem::path& path);

 private:
  uint32_t vocab_size_;
  bool with_mask_;
  std::vector<uint32_t> tokens_;
  std::vector<uint64_t> ends_;
  std::vector<uint8_t> mask_;
};

// A memory-mapped shard. Opening checks the header and the document table;
// `verify_checksum` also reads every token (once per process is plenty).
class MappedShard {
 public:
  explicit MappedShard(const std::filesystem::path& path, bool verify_checksum = true);
  ~MappedShard();
  MappedShard(const MappedShard&) = delete;
  MappedShard& operator=(const MappedShard&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  uint64_t num_documents() const { return header_.num_documents; }
  uint64_t num_tokens() const { return header_.num_tokens; }
  std::span<const uint32_t> document(uint64_t index) const;
  bool has_loss_mask() const { return header_.has_loss_mask(); }
  // The document's loss mask (one 0/1 byte per token); empty without one.
  std::span<const uint8_t> loss_mask(uint64_t index) const;

 private:
  std::filesystem::path path_;
  ShardHeader header_;
  void* mapping_ = nullptr;
  size_t mapped_bytes_ = 0;
  const uint32_t* tokens_ = nullptr;
  const uint64_t* ends_ = nullptr;
  const uint8_t* mask_ = nullptr;
};

}  // namespace titan::data
