#include "titan/checkpoint/dcp_folder.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "titan/checkpoint/torch_archive.h"
#include "titan/checkpoint/torch_archive_writer.h"
#include "titan/core/error.h"

namespace titan::checkpoint {

namespace fs = std::filesystem;

namespace dcp_folder_detail {

// DCP's single-file-per-rank name for rank 0's first file.
constexpr const char* kRankZeroFile = "__0_0.distcp";
// Bigger than any .metadata a real model writes (a few MiB for thousands of tensors) by far.
constexpr uintmax_t kMaxMetadataBytes = uintmax_t{1} << 30;

std::string read_file(const fs::path& path) {
  std::error_code code;
  const uintmax_t size = fs::file_size(path, code);
  TITAN_CHECK(!code, "{}: cannot read ({})", path.string(), code.message());
  TITAN_CHECK(size <= kMaxMetadataBytes, "{}: {} bytes is too large for a checkpoint's metadata", path.string(), size);
  std::ifstream file(path, std::ios::binary);
  TITAN_CHECK(file.is_open(), "{}: cannot open", path.string());
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  TITAN_CHECK(bytes.size() == size, "{}: short read", path.string());
  return bytes;
}

// Copies the intersection of the `source` box (at `source_offsets`) and the
// `destination` box (at `destination_offsets`), both row-major of one dtype.
void copy_intersection(const Tensor& source, const Shape& source_offsets, Tensor& destination,
                       const Shape& destination_offsets) {
  const size_t rank = source.shape().size();
  Shape begin(rank), extent(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t lo = std::max(source_offsets[d], destination_offsets[d]);
    const int64_t hi = std::min(source_offsets[d] + source.shape()[d], destination_offsets[d] + destination.shape()[d]);
    if (hi <= lo) return;
    begin[d] = lo;
    extent[d] = hi - lo;
  }
  const size_t element = dtype_size(source.dtype());
  if (rank == 0) {
    std::memcpy(destination.data_ptr(), source.data_ptr(), element);
    return;
  }
  auto strides_of = [](const Shape& shape) {
    Shape strides(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
    return strides;
  };
  const Shape source_strides = strides_of(source.shape()), destination_strides = strides_of(destination.shape());
  const auto* from = static_cast<const char*>(source.data_ptr());
  auto* to = static_cast<char*>(destination.data_ptr());
  const size_t row_bytes = static_cast<size_t>(extent[rank - 1]) * element;
  // Walk every index of the leading dims; the last dim is one memcpy.
  Shape index(rank, 0);
  while (true) {
    int64_t source_at = 0, destination_at = 0;
    for (size_t d = 0; d < rank; ++d) {
      source_at += (begin[d] + index[d] - source_offsets[d]) * source_strides[d];
      destination_at += (begin[d] + index[d] - destination_offsets[d]) * destination_strides[d];
    }
    std::memcpy(to + destination_at * static_cast<int64_t>(element), from + source_at * static_cast<int64_t>(element),
                row_bytes);
    size_t d = rank - 1;
    while (d-- > 0) {
      if (++index[d] < extent[d]) break;
      index[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

}  // namespace dcp_folder_detail

bool is_dcp_folder(const std::string& folder) {
  return fs::is_directory(folder) && fs::is_regular_file(fs::path(folder) / kDcpMetadataFile);
}

DcpFolderReader::DcpFolderReader(std::string folder) : folder_(std::move(folder)) {
  const fs::path root(folder_);
  const std::string metadata_path = (root / kDcpMetadataFile).string();
  metadata_ = parse_dcp_metadata(dcp_folder_detail::read_file(root / kDcpMetadataFile), metadata_path);
  std::map<std::string, uintmax_t> sizes;
  auto check = [&](const DcpStorage& storage, const std::string& key) {
    auto found = sizes.find(storage.relative_path);
    if (found == sizes.end()) {
      const fs::path file = root / storage.relative_path;
      std::error_code code;
      const uintmax_t size = fs::is_regular_file(file, code) ? fs::file_size(file, code) : 0;
      TITAN_CHECK(!code && fs::is_regular_file(file), "{}: item '{}' is stored in '{}', which is missing",
                  metadata_path, key, file.string());
      found = sizes.emplace(storage.relative_path, size).first;
    }
    TITAN_CHECK(storage.offset <= found->second && storage.length <= found->second - storage.offset,
                "{}: item '{}' is stored at bytes [{}, {}) of '{}', which has {} bytes", metadata_path, key,
                storage.offset, storage.offset + storage.length, storage.relative_path, found->second);
  };
  for (const auto& [key, tensor] : metadata_.tensors) {
    for (const DcpChunk& chunk : tensor.chunks) check(chunk.storage, key);
  }
  for (const auto& [key, storage] : metadata_.objects) check(storage, key);
}

const DcpTensorItem& DcpFolderReader::tensor(const std::string& key) const {
  const auto found = metadata_.tensors.find(key);
  TITAN_CHECK(found != metadata_.tensors.end(), "{}/{}: no tensor '{}'", folder_, kDcpMetadataFile, key);
  return found->second;
}

std::unique_ptr<TorchArchive> DcpFolderReader::read_object(const std::string& key) const {
  const auto found = metadata_.objects.find(key);
  TITAN_CHECK(found != metadata_.objects.end(), "{}/{}: no non-tensor item '{}'", folder_, kDcpMetadataFile, key);
  const DcpStorage& storage = found->second;
  const std::string path = (fs::path(folder_) / storage.relative_path).string();
  // An archive of length 0 would mean "to the end of the file" to TorchArchive: DCP never writes one.
  TITAN_CHECK(storage.length > 0, "{}: item '{}' has an empty storage range", path, key);
  return std::make_unique<TorchArchive>(path, storage.offset, storage.length);
}

Tensor DcpFolderReader::read(const std::string& key) const {
  return read_box(key, Shape(tensor(key).size.size(), 0), tensor(key).size);
}

Tensor DcpFolderReader::read_box(const std::string& key, const Shape& offsets, const Shape& shape) const {
  const DcpTensorItem& item = tensor(key);
  TITAN_CHECK(item.dtype.has_value(), "{}/{}: tensor '{}' is {}, a dtype titan does not read", folder_,
              kDcpMetadataFile, key, item.dtype_name);
  TITAN_CHECK(offsets.size() == item.size.size() && shape.size() == item.size.size(),
              "{}: box of {} dims asked of tensor '{}' of {}", folder_, shape.size(), key, shape_str(item.size));
  for (size_t d = 0; d < shape.size(); ++d) {
    TITAN_CHECK(offsets[d] >= 0 && shape[d] >= 0 && offsets[d] + shape[d] <= item.size[d],
                "{}: box at {} of {} lies outside tensor '{}' of {}", folder_, shape_str(offsets), shape_str(shape),
                key, shape_str(item.size));
  }
  Tensor out = Tensor::empty(shape, *item.dtype);
  for (const DcpChunk& chunk : item.chunks) {
    bool meets = true;
    for (size_t d = 0; d < shape.size() && meets; ++d) {
      meets = chunk.offsets[d] < offsets[d] + shape[d] && offsets[d] < chunk.offsets[d] + chunk.sizes[d];
    }
    if (!meets || shape_numel(shape) == 0) continue;
    const std::string path = (fs::path(folder_) / chunk.storage.relative_path).string();
    // An archive of length 0 would mean "to the end of the file" to TorchArchive: DCP never writes one.
    TITAN_CHECK(chunk.storage.length > 0, "{}: tensor '{}' has an empty storage range", path, key);
    const TorchArchive archive(path, chunk.storage.offset, chunk.storage.length);
    TITAN_CHECK(archive.is_tensor(archive.root()), "{} at byte {}: the item for tensor '{}' holds a {}, not a tensor",
                path, chunk.storage.offset, key, archive.root().describe());
    Tensor piece = archive.read_tensor(archive.root());
    TITAN_CHECK(piece.shape() == chunk.sizes && piece.dtype() == *item.dtype,
                "{} at byte {}: tensor '{}' chunk is {} {}, but .metadata says {} {}", path, chunk.storage.offset, key,
                dtype_name(piece.dtype()), shape_str(piece.shape()), item.dtype_name, shape_str(chunk.sizes));
    if (!piece.is_contiguous() || piece.storage_offset() != 0) piece = piece.contiguous();
    dcp_folder_detail::copy_intersection(piece, chunk.offsets, out, offsets);
  }
  return out;
}

void write_dcp_folder(const std::string& folder, const TensorSources& sources, const std::vector<DcpObject>& objects) {
  const fs::path root(folder);
  fs::create_directories(root);
  TITAN_CHECK(!fs::exists(root / kDcpMetadataFile), "{}: already holds a checkpoint ({})", folder, kDcpMetadataFile);
  const std::string data_path = (root / dcp_folder_detail::kRankZeroFile).string();
  DcpMetadata metadata;
  {
    std::ofstream out(data_path, std::ios::binary | std::ios::trunc);
    TITAN_CHECK(out.is_open(), "{}: cannot create the file", data_path);
    uint64_t offset = 0;
    for (const DcpObject& object : objects) {
      TITAN_CHECK(metadata.objects.count(object.name) == 0, "{}: item '{}' given twice", folder, object.name);
      const uint64_t length = write_torch_object(out, object.pickle, data_path);
      metadata.objects[object.name] = {dcp_folder_detail::kRankZeroFile, offset, length};
      metadata.keys.push_back(object.name);
      offset += length;
    }
    for (const TensorSource& source : sources) {
      TITAN_CHECK(metadata.tensors.count(source.name) == 0 && metadata.objects.count(source.name) == 0,
                  "{}: item '{}' given twice", folder, source.name);
      const Tensor tensor = source.read();
      TITAN_CHECK(tensor.shape() == source.shape && tensor.dtype() == source.dtype,
                  "{}: tensor '{}' read as {} {}, announced as {} {}", folder, source.name, dtype_name(tensor.dtype()),
                  shape_str(tensor.shape()), dtype_name(source.dtype), shape_str(source.shape));
      const uint64_t length = write_torch_tensor(out, tensor, data_path);
      DcpTensorItem item;
      item.dtype_name = torch_dtype_name(source.dtype);
      item.dtype = source.dtype;
      item.size = source.shape;
      item.chunks.push_back(
          {Shape(source.shape.size(), 0), source.shape, {dcp_folder_detail::kRankZeroFile, offset, length}});
      metadata.tensors[source.name] = std::move(item);
      metadata.keys.push_back(source.name);
      offset += length;
    }
    out.flush();
    TITAN_CHECK(out.good(), "{}: write failed (disk full?)", data_path);
  }
  const std::string bytes = write_dcp_metadata(metadata, fs::absolute(root).string());
  const fs::path temporary = root / (std::string(kDcpMetadataFile) + ".tmp");
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    TITAN_CHECK(out.is_open(), "{}: cannot create the file", temporary.string());
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    TITAN_CHECK(out.good(), "{}: write failed (disk full?)", temporary.string());
  }
  fs::rename(temporary, root / kDcpMetadataFile);
}

}  // namespace titan::checkpoint
