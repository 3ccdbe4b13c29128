// The `.metadata` file of a PyTorch Distributed Checkpoint (DCP) folder, as
// torch.distributed.checkpoint's FileSystemWriter writes it: a pickled
// Metadata dataclass listing every item of the saved state dict (a tensor:
// dtype, size and the chunks ranks saved of it; or a pickled Python object)
// and where each chunk's bytes are (file, offset, length). Read through the
// restricted unpickler, accepting only the classes DCP pickles; nothing in
// the file runs. Written with pickle protocol 2 so any PyTorch 2.x reads it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::checkpoint {

inline constexpr const char* kDcpMetadataFile = ".metadata";

// Where one item's bytes are: a torch.save archive (tensor chunks) or a
// pickle (other items) at [offset, offset + length) of a file in the folder.
struct DcpStorage {
  std::string relative_path;  // a plain file name in the folder, checked
  uint64_t offset = 0, length = 0;
};

// A box of a tensor one rank saved.
struct DcpChunk {
  Shape offsets, sizes;
  DcpStorage storage;
};

struct DcpTensorItem {
  std::string dtype_name;      // torch's name: "float32", "bfloat16", ...
  std::optional<DType> dtype;  // nullopt: a dtype titan has no kernel type for (refused when read)
  Shape size;
  std::vector<DcpChunk> chunks;  // disjoint, inside `size`, covering it
};

struct DcpMetadata {
  std::vector<std::string> keys;  // every item, in the file's order
  std::map<std::string, DcpTensorItem> tensors;
  std::map<std::string, DcpStorage> objects;  // BytesStorageMetadata items
  std::string version;                        // Metadata.version ("1.0.0"); empty when absent
};

// Parses a `.metadata` file's bytes. Refuses, naming `source` and the item:
// any global outside DCP's classes, malformed pickles, chunks outside their
// tensor or overlapping or not covering it, a chunk or item with no storage,
// storage paths leaving the folder, and storage transforms (compression
// extensions) titan cannot undo.
DcpMetadata parse_dcp_metadata(std::string_view bytes, const std::string& source);

// The globals a DCP `.metadata` may name (for the restricted unpickler).
bool dcp_metadata_accepts(const std::string& module, const std::string& name);

// Metadata's pickle for `metadata` (its keys in order), as FileSystemWriter
// would write it for a checkpoint at `checkpoint_id`.
std::string write_dcp_metadata(const DcpMetadata& metadata, const std::string& checkpoint_id);

// The torch dtype name for a titan dtype, and back (nullopt: no titan dtype).
std::optional<DType> dtype_from_torch_name(std::string_view name);

}  // namespace titan::checkpoint
