// A PyTorch Distributed Checkpoint folder (torch.distributed.checkpoint with
// FileSystemWriter, as TorchTitan saves): `.metadata` (dcp_metadata.h) and
// `__<rank>_<n>.distcp` files, each a run of torch.save archives, one per
// tensor chunk a rank saved. The reader assembles whole tensors, or any box
// of one (a shard of this job's layout), from the chunks of every rank that
// saved it, whatever mesh that was; the writer writes one rank's folder of
// whole tensors, which PyTorch loads into any sharding.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "titan/checkpoint/dcp_metadata.h"
#include "titan/checkpoint/tensor_source.h"
#include "titan/core/tensor.h"

namespace titan::checkpoint {

class TorchArchive;

// Whether `folder` holds a DCP `.metadata` file.
bool is_dcp_folder(const std::string& folder);

class DcpFolderReader {
 public:
  // Parses `.metadata` and checks every storage range lies inside its file.
  explicit DcpFolderReader(std::string folder);
  const std::string& folder() const { return folder_; }
  const DcpMetadata& metadata() const { return metadata_; }
  bool has_tensor(const std::string& key) const { return metadata_.tensors.count(key) != 0; }
  const DcpTensorItem& tensor(const std::string& key) const;
  // A whole tensor, in its stored dtype.
  Tensor read(const std::string& key) const;
  // The box of `shape` at `offsets` (row-major, stored dtype), reading only the chunks it meets.
  Tensor read_box(const std::string& key, const Shape& offsets, const Shape& shape) const;
  bool has_object(const std::string& key) const { return metadata_.objects.count(key) != 0; }
  // A non-tensor item (torch.save of a Python object): its archive, whose
  // root() is the object as data (read through the restricted unpickler).
  std::unique_ptr<TorchArchive> read_object(const std::string& key) const;

 private:
  std::string folder_;
  DcpMetadata metadata_;
};

// A non-tensor item of a DCP folder (BytesStorageMetadata): `pickle` is the
// Python object's pickle (protocol 2), which is stored as torch.save stores it.
struct DcpObject {
  std::string name;
  std::string pickle;
};

// Writes `sources` and `objects` as a one-rank DCP folder: every tensor
// whole, one chunk, in `__0_0.distcp` (the objects first, as FileSystemWriter
// orders a file), then `.metadata` (written last, under a temporary name and
// renamed, as FileSystemWriter does). `folder` must not hold a `.metadata` yet.
void write_dcp_folder(const std::string& folder, const TensorSources& sources,
                      const std::vector<DcpObject>& objects = {});

}  // namespace titan::checkpoint
