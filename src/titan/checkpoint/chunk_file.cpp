#include "titan/checkpoint/chunk_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "titan/checkpoint/crc32c.h"
#include "titan/checkpoint/safetensors_header.h"
#include "titan/core/error.h"

namespace titan::checkpoint {
namespace {

void write_all(int fd, const char* data, uint64_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, std::min<uint64_t>(size, uint64_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    TITAN_CHECK(n > 0, "writing '{}' failed: {}", path, std::strerror(errno));
    data += n;
    size -= static_cast<uint64_t>(n);
  }
}

// A contiguous piece of the bytes [begin, end) of a chunk that were read.
struct Segment {
  const char* data;
  uint64_t size;
};

// Copies the box `extent` at `src_start` of a row-major array of shape
// `src_shape` to `dst_start` of one of shape `dst_shape`, innermost dim as one memcpy.
void copy_box(const char* src, const std::vector<int64_t>& src_shape, const std::vector<int64_t>& src_start, char* dst,
              const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& dst_start,
              const std::vector<int64_t>& extent, size_t element, size_t dim = 0) {
  int64_t src_stride = 1, dst_stride = 1;
  for (size_t d = dim + 1; d < src_shape.size(); ++d) {
    src_stride *= src_shape[d];
    dst_stride *= dst_shape[d];
  }
  const char* s = src + static_cast<size_t>(src_start[dim] * src_stride) * element;
  char* t = dst + static_cast<size_t>(dst_start[dim] * dst_stride) * element;
  if (dim + 1 == src_shape.size()) {
    std::memcpy(t, s, static_cast<size_t>(extent[dim]) * element);
    return;
  }
  for (int64_t i = 0; i < extent[dim]; ++i) {
    copy_box(s + static_cast<size_t>(i * src_stride) * element, src_shape, src_start,
             t + static_cast<size_t>(i * dst_stride) * element, dst_shape, dst_start, extent, element, dim + 1);
  }
}

std::string box_str(const std::vector<int64_t>& v) { return nlohmann::json(v).dump(); }

}  // namespace

std::vector<std::pair<std::string, ChunkMetadata>> write_chunk_file(const std::string& path,
                                                                    const std::vector<ChunkToWrite>& chunks,
                                                                    uint64_t block_bytes,
                                                                    const std::function<void()>& midway) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "titan-checkpoint-chunks"}};
  std::vector<const ChunkToWrite*> kept;
  uint64_t data_bytes = 0;
  for (const ChunkToWrite& chunk : chunks) {
    if (chunk.data.numel() == 0) continue;
    TITAN_CHECK(chunk.data.device().is_cpu() && chunk.data.is_contiguous(),
                "checkpoint chunk '{}' must be a contiguous host tensor", chunk.name);
    TITAN_CHECK(!header.contains(chunk.name), "checkpoint file {}: tensor '{}' twice", path, chunk.name);
    header[chunk.name] = {{"dtype", safetensors_dtype_name(chunk.data.dtype())},
                          {"shape", chunk.data.shape()},
                          {"data_offsets", {data_bytes, data_bytes + chunk.data.nbytes()}}};
    data_bytes += chunk.data.nbytes();
    kept.push_back(&chunk);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);

  // The checksums are computed on a second thread while this one writes: the
  // CRC (about 8 GB/s on one core) would otherwise add a third to the write time.
  std::vector<std::vector<uint32_t>> checksums(kept.size());
  std::thread checksummer([&] {
    for (size_t i = 0; i < kept.size(); ++i) {
      const char* bytes = static_cast<const char*>(kept[i]->data.data_ptr());
      const uint64_t size = kept[i]->data.nbytes();
      for (uint64_t b = 0; b < size; b += block_bytes)
        checksums[i].push_back(crc32c(bytes + b, std::min(block_bytes, size - b)));
    }
  });
  struct JoinOnExit {
    std::thread& thread;
    ~JoinOnExit() {
      if (thread.joinable()) thread.join();
    }
  } join_checksummer{checksummer};

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TITAN_CHECK(fd >= 0, "cannot create '{}': {}", path, std::strerror(errno));
  std::vector<std::pair<std::string, ChunkMetadata>> written;
  try {
    write_all(fd, length, 8, path);
    write_all(fd, text.data(), text.size(), path);
    uint64_t offset = 8 + text.size(), done = 0;
    bool called = !midway;
    const std::string file = path.substr(path.find_last_of('/') + 1);
    for (const ChunkToWrite* chunk : kept) {
      ChunkMetadata meta{file, offset, chunk->offsets, chunk->data.shape(), {}};
      const char* bytes = static_cast<const char*>(chunk->data.data_ptr());
      const uint64_t size = chunk->data.nbytes();
      const uint64_t piece = block_bytes * 8;  // the midway hook fires within a few MiB of halfway
      for (uint64_t at = 0; at < size; at += piece) {
        const uint64_t n = std::min(piece, size - at);
        write_all(fd, bytes + at, n, path);
        done += n;
        if (!called && 2 * done >= data_bytes) {
          called = true;
          midway();
        }
      }
      offset += size;
      written.emplace_back(chunk->name, std::move(meta));
    }
    TITAN_CHECK(::fsync(fd) == 0, "fsync '{}' failed: {}", path, std::strerror(errno));
    checksummer.join();
    for (size_t i = 0; i < kept.size(); ++i) written[i].second.checksums = std::move(checksums[i]);
  } catch (...) {
    ::close(fd);
    throw;
  }
  TITAN_CHECK(::close(fd) == 0, "closing '{}' failed: {}", path, std::strerror(errno));
  return written;
}

ChunkReader::ChunkReader(std::string folder, const CheckpointMetadata& metadata)
    : folder_(std::move(folder)), metadata_(metadata) {}

ChunkReader::~ChunkReader() {
  for (auto& [name, file] : files_) ::close(file.first);
}

int ChunkReader::open_file(const std::string& file, uint64_t& size) {
  auto found = files_.find(file);
  if (found == files_.end()) {
    const std::string path = folder_ + "/" + file;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    TITAN_CHECK(fd >= 0, "{}: cannot open data file {}: {}", folder_, file, std::strerror(errno));
    struct stat info {};
    ::fstat(fd, &info);
    found = files_.emplace(file, std::pair{fd, static_cast<uint64_t>(info.st_size)}).first;
  }
  size = found->second.second;
  return found->second.first;
}

void ChunkReader::read_box(const std::string& name, const Tensor& target, const std::vector<int64_t>& global_shape,
                           const std::vector<int64_t>& offsets) {
  auto found = metadata_.tensors.find(name);
  TITAN_CHECK(found != metadata_.tensors.end(), "{}: the checkpoint has no tensor '{}'", folder_, name);
  const TensorMetadata& tensor = found->second;
  TITAN_CHECK(tensor.shape == global_shape, "{}: tensor '{}' has shape {} in the checkpoint but {} in this model",
              folder_, name, box_str(tensor.shape), box_str(global_shape));
  TITAN_CHECK(tensor.dtype == target.dtype(), "{}: tensor '{}' is {} in the checkpoint but {} here", folder_, name,
              dtype_name(tensor.dtype), dtype_name(target.dtype()));
  TITAN_CHECK(target.device().is_cpu() && target.is_contiguous(),
              "checkpoint load of '{}': target not a contiguous "
              "host tensor",
              name);
  const std::vector<int64_t>& target_shape = target.shape();
  const size_t element = dtype_size(tensor.dtype), dims = global_shape.size();
  const uint64_t block = metadata_.checksum_block_bytes;
  char* destination = static_cast<char*>(target.data_ptr());
  for (const ChunkMetadata& chunk : tensor.chunks) {
    std::vector<int64_t> lo(dims), hi(dims);
    bool empty = false;
    for (size_t d = 0; d < dims; ++d) {
      lo[d] = std::max(chunk.offsets[d], offsets[d]);
      hi[d] = std::min(chunk.offsets[d] + chunk.shape[d], offsets[d] + target_shape[d]);
      empty = empty || lo[d] >= hi[d];
    }
    if (empty) continue;
    // Whole rows of the chunk along dim 0, widened to checksum blocks.
    uint64_t row_bytes = element;
    for (size_t d = 1; d < dims; ++d) row_bytes *= static_cast<uint64_t>(chunk.shape[d]);
    const uint64_t total = chunk_bytes(chunk, tensor.dtype);
    const uint64_t first = dims == 0 ? 0 : static_cast<uint64_t>(lo[0] - chunk.offsets[0]) * row_bytes;
    const uint64_t last = dims == 0 ? total : static_cast<uint64_t>(hi[0] - chunk.offsets[0]) * row_bytes;
    const uint64_t begin = first / block * block, end = std::min(total, (last + block - 1) / block * block);
    uint64_t file_size = 0;
    const int fd = open_file(chunk.file, file_size);
    TITAN_CHECK(chunk.byte_offset + end <= file_size,
                "{}/{}: file is truncated: tensor '{}' needs bytes up to {} but the file has {}", folder_, chunk.file,
                name, chunk.byte_offset + end, file_size);
    // When the overlap is whole rows of both the chunk and the target, its
    // bytes land straight in the target; only the block padding around them
    // goes through scratch space.
    bool rows_whole = dims > 0;
    for (size_t d = 1; d < dims; ++d) {
      rows_whole = rows_whole && lo[d] == chunk.offsets[d] && hi[d] == chunk.offsets[d] + chunk.shape[d] &&
                   lo[d] == offsets[d] && hi[d] == offsets[d] + target_shape[d];
    }
    std::vector<char> head, tail, whole;
    std::vector<Segment> segments;
    if (rows_whole || dims == 0) {
      head.resize(first - begin);
      tail.resize(end - last);
      char* middle = destination + (dims == 0 ? 0 : static_cast<uint64_t>(lo[0] - offsets[0]) * row_bytes);
      segments = {{head.data(), head.size()}, {middle, last - first}, {tail.data(), tail.size()}};
    } else {
      whole.resize(end - begin);
      segments = {{whole.data(), whole.size()}};
    }
    uint64_t at = chunk.byte_offset + begin;
    for (const Segment& s : segments) {
      uint64_t got = 0;
      while (got < s.size) {
        const ssize_t n = ::pread(fd, const_cast<char*>(s.data) + got, std::min<uint64_t>(s.size - got, 1u << 30),
                                  static_cast<off_t>(at + got));
        if (n < 0 && errno == EINTR) continue;
        TITAN_CHECK(n > 0, "{}/{}: reading tensor '{}' failed (file truncated?)", folder_, chunk.file, name);
        got += static_cast<uint64_t>(n);
      }
      at += s.size;
    }
    // Verify every block read, walking the segments in order.
    size_t segment = 0;
    uint64_t within = 0;
    for (uint64_t b = begin; b < end; b += block) {
      uint64_t remaining = std::min(block, total - b);
      uint32_t crc = 0;
      while (remaining > 0) {
        const Segment& s = segments[segment];
        const uint64_t n = std::min(remaining, s.size - within);
        crc = crc32c(s.data + within, n, crc);
        remaining -= n;
        within += n;
        if (within == s.size) {
          ++segment;
          within = 0;
        }
      }
      TITAN_CHECK(crc == chunk.checksums[b / block],
                  "{}/{}: checksum mismatch in tensor '{}' (chunk at {}, bytes [{}, {}) of it): the file is corrupt",
                  folder_, chunk.file, name, box_str(chunk.offsets), b, std::min(b + block, total));
    }
    if (!whole.empty()) {
      std::vector<int64_t> slab_shape = chunk.shape, src_start(dims), dst_start(dims), extent(dims);
      slab_shape[0] = static_cast<int64_t>((last - first) / row_bytes);
      for (size_t d = 0; d < dims; ++d) {
        src_start[d] = d == 0 ? 0 : lo[d] - chunk.offsets[d];
        dst_start[d] = lo[d] - offsets[d];
        extent[d] = hi[d] - lo[d];
      }
      copy_box(whole.data() + (first - begin), slab_shape, src_start, destination, target_shape, dst_start, extent,
               element);
    }
    bytes_read_ += end - begin;
  }
}

}  // namespace titan::checkpoint
