#include "titan/checkpoint/checkpoint_metadata.h"

#include <limits>

#include "titan/checkpoint/safetensors_header.h"
#include "titan/core/error.h"

namespace titan::checkpoint {
namespace {

using json = nlohmann::json;

// Limits that keep a hostile file from making the parser allocate or loop without bound.
constexpr int64_t kMaxDims = 8;
constexpr size_t kMaxChunksPerTensor = 4096;
constexpr uint64_t kMaxElements = uint64_t{1} << 50;

const json& member(const json& object, const char* key, const std::string& where) {
  TITAN_CHECK(object.is_object() && object.contains(key), "{}: missing \"{}\"", where, key);
  return object[key];
}

uint64_t unsigned_number(const json& value, const std::string& where) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  TITAN_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0, "{}: expected a non-negative integer, got {}",
              where, value.dump());
  return static_cast<uint64_t>(value.get<int64_t>());
}

std::vector<int64_t> dims(const json& value, const std::string& where) {
  TITAN_CHECK(value.is_array() && value.size() <= kMaxDims, "{}: expected an array of at most {} integers", where,
              kMaxDims);
  std::vector<int64_t> out;
  for (const json& item : value) {
    const uint64_t n = unsigned_number(item, where);
    TITAN_CHECK(n <= kMaxElements, "{}: dimension {} is too large", where, n);
    out.push_back(static_cast<int64_t>(n));
  }
  return out;
}

uint64_t element_count(const std::vector<int64_t>& shape, const std::string& where) {
  uint64_t count = 1;
  for (int64_t d : shape) {
    const auto n = static_cast<uint64_t>(d);
    TITAN_CHECK(n == 0 || count <= kMaxElements / n, "{}: shape has too many elements", where);
    count *= n;
  }
  return count;
}

bool boxes_overlap(const ChunkMetadata& a, const ChunkMetadata& b) {
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (a.offsets[d] + a.shape[d] <= b.offsets[d] || b.offsets[d] + b.shape[d] <= a.offsets[d]) return false;
  }
  return true;
}

ChunkMetadata parse_chunk(const json& value, const TensorMetadata& tensor, uint64_t block_bytes,
                          const std::string& where) {
  ChunkMetadata chunk;
  const json& file = member(value, "file", where);
  TITAN_CHECK(file.is_string(), "{}: \"file\" must be a string", where);
  chunk.file = file.get<std::string>();
  TITAN_CHECK(
      !chunk.file.empty() && chunk.file.find('/') == std::string::npos && chunk.file != "." && chunk.file != "..",
      "{}: file '{}' must be a plain file name in the step folder", where, chunk.file);
  chunk.byte_offset = unsigned_number(member(value, "byte_offset", where), where + ".byte_offset");
  chunk.offsets = dims(member(value, "offsets", where), where + ".offsets");
  chunk.shape = dims(member(value, "shape", where), where + ".shape");
  TITAN_CHECK(chunk.offsets.size() == tensor.shape.size() && chunk.shape.size() == tensor.shape.size(),
              "{}: offsets and shape need {} dims like the tensor", where, tensor.shape.size());
  for (size_t d = 0; d < tensor.shape.size(); ++d) {
    TITAN_CHECK(chunk.offsets[d] <= tensor.shape[d] && chunk.shape[d] <= tensor.shape[d] - chunk.offsets[d],
                "{}: box at {} of shape {} leaves the tensor's shape in dim {}", where, json(chunk.offsets).dump(),
                json(chunk.shape).dump(), d);
  }
  const uint64_t elements = element_count(chunk.shape, where);
  TITAN_CHECK(elements > 0, "{}: empty chunk (writers leave those out)", where);
  const uint64_t bytes = elements * dtype_size(tensor.dtype);
  TITAN_CHECK(chunk.byte_offset <= std::numeric_limits<uint64_t>::max() - bytes, "{}: byte range overflows", where);
  const json& checksums = member(value, "crc32c", where);
  const uint64_t blocks = (bytes + block_bytes - 1) / block_bytes;
  TITAN_CHECK(checksums.is_array() && checksums.size() == blocks, "{}: expected {} crc32c values (one per {} bytes)",
              where, blocks, block_bytes);
  for (const json& c : checksums) {
    const uint64_t crc = unsigned_number(c, where + ".crc32c");
    TITAN_CHECK(crc <= 0xffffffffu, "{}: crc32c {} is not 32-bit", where, crc);
    chunk.checksums.push_back(static_cast<uint32_t>(crc));
  }
  return chunk;
}

}  // namespace

uint64_t chunk_bytes(const ChunkMetadata& chunk, DType dtype) {
  uint64_t count = 1;
  for (int64_t d : chunk.shape) count *= static_cast<uint64_t>(d);
  return count * dtype_size(dtype);
}

std::string checkpoint_metadata_to_json(const CheckpointMetadata& metadata) {
  json tensors = json::object();
  for (const auto& [name, tensor] : metadata.tensors) {
    json chunks = json::array();
    for (const ChunkMetadata& c : tensor.chunks) {
      chunks.push_back({{"file", c.file},
                        {"byte_offset", c.byte_offset},
                        {"offsets", c.offsets},
                        {"shape", c.shape},
                        {"crc32c", c.checksums}});
    }
    tensors[name] = {{"dtype", safetensors_dtype_name(tensor.dtype)}, {"shape", tensor.shape}, {"chunks", chunks}};
  }
  const json root{{"format", "titan-checkpoint"}, {"version", kCheckpointFormatVersion},
                  {"step", metadata.step},        {"titan_version", metadata.titan_version},
                  {"checksum", "crc32c"},         {"checksum_block_bytes", metadata.checksum_block_bytes},
                  {"state", metadata.state},      {"tensors", tensors}};
  return root.dump(1);
}

CheckpointMetadata parse_checkpoint_metadata(std::string_view text, const std::string& source) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  TITAN_CHECK(!root.is_discarded(), "{}: not valid JSON", source);
  TITAN_CHECK(root.is_object(), "{}: expected a JSON object", source);
  const json& format = member(root, "format", source);
  TITAN_CHECK(format == "titan-checkpoint", "{}: \"format\" is {}, not \"titan-checkpoint\"", source, format.dump());
  const uint64_t version = unsigned_number(member(root, "version", source), source + ": version");
  TITAN_CHECK(version == kCheckpointFormatVersion, "{}: format version {} (this titan reads version {})", source,
              version, kCheckpointFormatVersion);
  TITAN_CHECK(member(root, "checksum", source) == "crc32c", "{}: unknown checksum {}", source, root["checksum"].dump());
  CheckpointMetadata metadata;
  metadata.step = static_cast<int64_t>(unsigned_number(member(root, "step", source), source + ": step"));
  const json& version_name = member(root, "titan_version", source);
  TITAN_CHECK(version_name.is_string(), "{}: \"titan_version\" must be a string", source);
  metadata.titan_version = version_name.get<std::string>();
  metadata.checksum_block_bytes =
      unsigned_number(member(root, "checksum_block_bytes", source), source + ": checksum_block_bytes");
  TITAN_CHECK(metadata.checksum_block_bytes >= 4096 && metadata.checksum_block_bytes <= (uint64_t{1} << 32),
              "{}: checksum_block_bytes {} outside [4096, 2^32]", source, metadata.checksum_block_bytes);
  const json& state = member(root, "state", source);
  TITAN_CHECK(state.is_object(), "{}: \"state\" must be an object", source);
  metadata.state = state;
  const json& tensors = member(root, "tensors", source);
  TITAN_CHECK(tensors.is_object(), "{}: \"tensors\" must be an object", source);
  for (const auto& [name, value] : tensors.items()) {
    const std::string where = source + ": tensor '" + name + "'";
    TensorMetadata tensor;
    const json& dtype = member(value, "dtype", where);
    TITAN_CHECK(dtype.is_string(), "{}: \"dtype\" must be a string", where);
    tensor.dtype = parse_safetensors_dtype(dtype.get<std::string>(), source, name);
    tensor.shape = dims(member(value, "shape", where), where + " shape");
    const uint64_t elements = element_count(tensor.shape, where);
    const json& chunks = member(value, "chunks", where);
    TITAN_CHECK(chunks.is_array() && chunks.size() <= kMaxChunksPerTensor,
                "{}: \"chunks\" must be an array of at most {}", where, kMaxChunksPerTensor);
    uint64_t covered = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const std::string chunk_where = fmt::format("{} chunk {}", where, i);
      ChunkMetadata chunk = parse_chunk(chunks[i], tensor, metadata.checksum_block_bytes, chunk_where);
      for (const ChunkMetadata& other : tensor.chunks) {
        TITAN_CHECK(!boxes_overlap(chunk, other), "{}: overlaps an earlier chunk", chunk_where);
      }
      covered += element_count(chunk.shape, chunk_where);
      tensor.chunks.push_back(std::move(chunk));
    }
    // Disjoint boxes inside the tensor whose sizes add up to it cover it exactly.
    TITAN_CHECK(covered == elements, "{}: chunks hold {} of its {} elements", where, covered, elements);
    metadata.tensors.emplace(name, std::move(tensor));
  }
  return metadata;
}

}  // namespace titan::checkpoint
