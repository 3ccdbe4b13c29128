#include "titan/checkpoint/dcp_metadata.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>

#include "titan/checkpoint/pickle_reader.h"
#include "titan/checkpoint/pickle_writer.h"
#include "titan/core/error.h"

namespace titan::checkpoint {

namespace dcp_metadata_detail {

// Module paths as PyTorch 2.x pickles them (TensorProperties lived in
// torch.distributed._shard.sharded_tensor.metadata before 2.3).
constexpr std::string_view kMetadataModule = "torch.distributed.checkpoint.metadata";
constexpr std::string_view kShardModule = "torch.distributed._shard.sharded_tensor.metadata";
constexpr std::string_view kFilesystemModule = "torch.distributed.checkpoint.filesystem";

// "[2, 3]": shape_str's form, without the tensor library (this file is fuzzed alone).
std::string dims(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// torch's dtype objects, by the names they pickle under (torch.<name>).
const std::set<std::string, std::less<>>& torch_dtype_names() {
  static const std::set<std::string, std::less<>> names{
      "float32", "float",  "float64", "double",    "float16",    "half",          "bfloat16",   "int8",
      "int16",   "short",  "int32",   "int",       "int64",      "long",          "uint8",      "bool",
      "uint16",  "uint32", "uint64",  "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"};
  return names;
}

class Parser {
 public:
  explicit Parser(const std::string& source) : source_(source) {}

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: {}", source_, fmt::format(format, std::forward<Args>(args)...));
  }

  // The dict BUILD set on a dataclass instance of `module.name`.
  const PickleValue& fields(const PickleValue& value, std::string_view name, std::string_view what) const {
    if (!value.is_object_of(kMetadataModule, name) && !value.is_object_of(kFilesystemModule, name))
      error("{}: expected a {} object, found {}", what, name, value.describe());
    if (value.state == nullptr || !value.state->is(PickleKind::dict))
      error("{}: the {} object has no field dict", what, name);
    return *value.state;
  }
  const PickleValue& field(const PickleValue& dict, std::string_view key, std::string_view what) const {
    const PickleValue* value = dict.find(key);
    if (value == nullptr) error("{}: field '{}' is missing", what, key);
    return *value;
  }
  std::string text(const PickleValue& value, std::string_view what) const {
    if (!value.is(PickleKind::text)) error("{}: expected a str, found {}", what, value.describe());
    return value.text;
  }
  int64_t integer(const PickleValue& value, std::string_view what) const {
    if (!value.is(PickleKind::integer)) error("{}: expected an int, found {}", what, value.describe());
    return value.integer;
  }
  // torch.Size((a, b, ...)): non-negative ints.
  Shape size(const PickleValue& value, std::string_view what) const {
    if (!value.is_object_of("torch", "Size") || value.arguments == nullptr || value.arguments->items.size() != 1 ||
        !value.arguments->is(PickleKind::tuple))
      error("{}: expected a torch.Size, found {}", what, value.describe());
    const PickleValue& dims = *value.arguments->items[0];
    if (!dims.is(PickleKind::tuple) && !dims.is(PickleKind::list))
      error("{}: torch.Size of a {}", what, dims.describe());
    if (dims.items.size() > 64) error("{}: {} dimensions", what, dims.items.size());
    Shape shape;
    for (const PickleValue* dim : dims.items) {
      const int64_t v = integer(*dim, what);
      if (v < 0) error("{}: negative size {}", what, v);
      shape.push_back(v);
    }
    return shape;
  }
  // torch.<dtype>, as a global.
  std::string dtype(const PickleValue& value, std::string_view what) const {
    if (value.kind != PickleKind::global || value.text != "torch" || torch_dtype_names().count(value.name) == 0)
      error("{}: expected a torch dtype, found {}", what, value.describe());
    return value.name;
  }
  void strided(const PickleValue& value, std::string_view what) const {
    const bool global = value.is_global("torch", "strided");
    const bool by_name = value.is_object_of("torch.serialization", "_get_layout") && value.arguments != nullptr &&
                         value.arguments->items.size() == 1 && value.arguments->items[0]->is(PickleKind::text) &&
                         value.arguments->items[0]->text == "torch.strided";
    if (!global && !by_name) error("{}: only strided tensors are read, found layout {}", what, value.describe());
  }

  DcpStorage storage(const PickleValue& value, std::string_view what) const {
    const PickleValue& f = fields(value, "_StorageInfo", what);
    DcpStorage info;
    info.relative_path = text(field(f, "relative_path", what), what);
    const int64_t offset = integer(field(f, "offset", what), what), length = integer(field(f, "length", what), what);
    if (offset < 0 || length < 0) error("{}: negative offset or length ({}, {})", what, offset, length);
    info.offset = static_cast<uint64_t>(offset);
    info.length = static_cast<uint64_t>(length);
    const PickleValue* transforms = f.find("transform_descriptors");
    if (transforms != nullptr && !transforms->is(PickleKind::none) && !transforms->items.empty())
      error("{}: stored through transform extensions (e.g. compression), which titan does not read", what);
    // FileSystemWriter writes "__<rank>_<n>.distcp": a plain name in the folder.
    const std::string& path = info.relative_path;
    if (path.empty() || path == "." || path == ".." || path.find('/') != std::string::npos ||
        path.find('\\') != std::string::npos || path.find('\0') != std::string::npos || path == kDcpMetadataFile)
      error("{}: storage path '{}' is not a file name inside the checkpoint folder", what, path);
    return info;
  }

  DcpMetadata parse(const PickleValue& root) const {
    const PickleValue& metadata = fields(root, "Metadata", "the Metadata");
    const PickleValue& items = field(metadata, "state_dict_metadata", "Metadata");
    if (!items.is(PickleKind::dict)) error("Metadata.state_dict_metadata is a {}", items.describe());
    // storage_data: MetadataIndex(fqn, offset) -> _StorageInfo.
    const PickleValue& storage_data = field(metadata, "storage_data", "Metadata");
    if (!storage_data.is(PickleKind::dict)) error("Metadata.storage_data is a {}", storage_data.describe());
    std::map<std::pair<std::string, std::optional<Shape>>, DcpStorage> storages;
    for (const auto& [key, value] : storage_data.entries) {
      const PickleValue& index = fields(*key, "MetadataIndex", "a storage_data key");
      const std::string fqn = text(field(index, "fqn", "MetadataIndex"), "MetadataIndex.fqn");
      const std::string what = fmt::format("storage of '{}'", fqn);
      std::optional<Shape> offset;
      const PickleValue* offset_value = index.find("offset");
      if (offset_value != nullptr && !offset_value->is(PickleKind::none)) offset = size(*offset_value, what);
      storages[{fqn, offset}] = storage(*value, what);
    }
    DcpMetadata out;
    const PickleValue* version = metadata.find("version");
    if (version != nullptr && !version->is(PickleKind::none)) out.version = text(*version, "Metadata.version");
    for (const auto& [key, value] : items.entries) {
      const std::string fqn = text(*key, "a state_dict_metadata key");
      if (out.tensors.count(fqn) != 0 || out.objects.count(fqn) != 0) error("item '{}' appears twice", fqn);
      const std::string what = fmt::format("item '{}'", fqn);
      out.keys.push_back(fqn);
      if (value->is_object_of(kMetadataModule, "BytesStorageMetadata")) {
        const auto found = storages.find({fqn, std::nullopt});
        if (found == storages.end()) error("{} has no storage_data entry", what);
        out.objects[fqn] = found->second;
        continue;
      }
      const PickleValue& f = fields(*value, "TensorStorageMetadata", what);
      DcpTensorItem tensor;
      tensor.size = size(field(f, "size", what), what + " size");
      tensor_properties(field(f, "properties", what), what, tensor);
      const PickleValue& chunks = field(f, "chunks", what);
      if (!chunks.is(PickleKind::list)) error("{}: chunks is a {}", what, chunks.describe());
      for (const PickleValue* chunk_value : chunks.items) {
        const PickleValue& c = fields(*chunk_value, "ChunkStorageMetadata", what + " chunk");
        DcpChunk chunk;
        chunk.offsets = size(field(c, "offsets", what), what + " chunk offsets");
        chunk.sizes = size(field(c, "sizes", what), what + " chunk sizes");
        const auto found = storages.find({fqn, chunk.offsets});
        if (found == storages.end())
          error("{}: no storage_data entry for the chunk at offsets {}", what, dims(chunk.offsets));
        chunk.storage = found->second;
        tensor.chunks.push_back(std::move(chunk));
      }
      check_chunks(tensor, what);
      out.tensors[fqn] = std::move(tensor);
    }
    return out;
  }

 private:
  void tensor_properties(const PickleValue& value, const std::string& what, DcpTensorItem& tensor) const {
    if (!value.is_object_of(kMetadataModule, "TensorProperties") &&
        !value.is_object_of(kShardModule, "TensorProperties"))
      error("{}: expected TensorProperties, found {}", what, value.describe());
    if (value.state == nullptr) error("{}: TensorProperties without state", what);
    const PickleValue& state = *value.state;
    // __getstate__'s tuple: (dtype, layout, requires_grad, memory format encoding, pin_memory).
    if (state.is(PickleKind::tuple)) {
      if (state.items.size() != 5)
        error("{}: TensorProperties state of {} values (5 expected)", what, state.items.size());
      tensor.dtype_name = dtype(*state.items[0], what);
      strided(*state.items[1], what);
      memory_format(*state.items[3], what);
    } else if (state.is(PickleKind::dict)) {
      tensor.dtype_name = dtype(field(state, "dtype", what), what);
      if (const PickleValue* layout = state.find("layout")) strided(*layout, what);
    } else {
      error("{}: TensorProperties state is a {}", what, state.describe());
    }
    tensor.dtype = dtype_from_torch_name(tensor.dtype_name);
  }

  // _MEM_FORMAT_ENCODING(0) (protocols < 4) or getattr(_MEM_FORMAT_ENCODING, 'TORCH_..._FORMAT') (Python >= 3.11,
  // protocol 4+).
  void memory_format(const PickleValue& value, const std::string& what) const {
    auto is_enum = [](const PickleValue& v) {
      return v.is_global(kMetadataModule, "_MEM_FORMAT_ENCODING") || v.is_global(kShardModule, "MEM_FORMAT_ENCODING");
    };
    if (value.kind == PickleKind::object && value.callable != nullptr && is_enum(*value.callable)) return;
    if (value.is_object_of("builtins", "getattr") && value.arguments != nullptr && value.arguments->items.size() == 2 &&
        is_enum(*value.arguments->items[0]) && value.arguments->items[1]->is(PickleKind::text))
      return;
    error("{}: unexpected memory format {}", what, value.describe());
  }

  void check_chunks(const DcpTensorItem& tensor, const std::string& what) const {
    int64_t numel = 1;
    for (int64_t d : tensor.size) {
      if (d != 0 && numel > (int64_t{1} << 62) / d) error("{}: size {} is too large", what, dims(tensor.size));
      numel *= d;
    }
    int64_t covered = 0;
    for (size_t i = 0; i < tensor.chunks.size(); ++i) {
      const DcpChunk& chunk = tensor.chunks[i];
      if (chunk.offsets.size() != tensor.size.size() || chunk.sizes.size() != tensor.size.size())
        error("{}: a chunk has {} dimensions, the tensor {}", what, chunk.sizes.size(), tensor.size.size());
      int64_t chunk_numel = 1;
      for (size_t d = 0; d < tensor.size.size(); ++d) {
        if (chunk.offsets[d] > tensor.size[d] || chunk.sizes[d] > tensor.size[d] - chunk.offsets[d])
          error("{}: chunk at {} of size {} lies outside the tensor's {}", what, dims(chunk.offsets), dims(chunk.sizes),
                dims(tensor.size));
        chunk_numel *= chunk.sizes[d];
      }
      covered += chunk_numel;
      for (size_t j = 0; j < i; ++j) {
        const DcpChunk& other = tensor.chunks[j];
        bool overlap = chunk_numel > 0;
        for (size_t d = 0; d < tensor.size.size() && overlap; ++d) {
          overlap = chunk.offsets[d] < other.offsets[d] + other.sizes[d] &&
                    other.offsets[d] < chunk.offsets[d] + chunk.sizes[d];
        }
        if (overlap) error("{}: chunks at {} and {} overlap", what, dims(other.offsets), dims(chunk.offsets));
      }
    }
    if (covered != numel)
      error("{}: its chunks hold {} of its {} elements (a checkpoint missing a rank's files?)", what, covered, numel);
  }

  const std::string& source_;
};

// Where titan writes an item in planner_data: the path of the key in the
// nested state dict DCP flattened (TorchTitan's model keys are top-level,
// its other Stateful objects nest one level: "optimizer", "state.<fqn>.exp_avg").
void pickle_planner_path(PickleWriter& pickle, const std::string& key) {
  pickle.mark();
  for (const char* nested : {"optimizer.", "lr_scheduler.", "dataloader.", "train_state."}) {
    const std::string prefix = nested;
    if (key.rfind(prefix, 0) == 0 && key.size() > prefix.size()) {
      pickle.text(prefix.substr(0, prefix.size() - 1)).text(key.substr(prefix.size())).tuple();
      return;
    }
  }
  pickle.text(key).tuple();
}

void pickle_size(PickleWriter& pickle, const Shape& shape) {
  pickle.global("torch", "Size").mark().mark();
  for (int64_t d : shape) pickle.integer(d);
  pickle.tuple().tuple().reduce();
}

// A dataclass instance as protocol 2 pickles it: cls.__new__(cls), then BUILD with its field dict (left open).
void begin_dataclass(PickleWriter& pickle, std::string_view module, std::string_view name) {
  pickle.global(module, name).empty_tuple().new_object().empty_dict().mark();
}
void end_dataclass(PickleWriter& pickle) { pickle.set_items().build(); }

void pickle_index(PickleWriter& pickle, const std::string& fqn, const Shape* offset, int64_t index) {
  begin_dataclass(pickle, kMetadataModule, "MetadataIndex");
  pickle.text("fqn").text(fqn).text("index");
  if (index >= 0) {
    pickle.integer(index);
  } else {
    pickle.none();
  }
  if (offset != nullptr) {
    pickle.text("offset");
    pickle_size(pickle, *offset);
  }
  end_dataclass(pickle);
}

void pickle_storage(PickleWriter& pickle, const DcpStorage& storage) {
  begin_dataclass(pickle, kFilesystemModule, "_StorageInfo");
  pickle.text("relative_path").text(storage.relative_path);
  pickle.text("offset").integer(static_cast<int64_t>(storage.offset));
  pickle.text("length").integer(static_cast<int64_t>(storage.length));
  end_dataclass(pickle);
}

}  // namespace dcp_metadata_detail

std::optional<DType> dtype_from_torch_name(std::string_view name) {
  if (name == "float32" || name == "float") return DType::f32;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float16" || name == "half") return DType::f16;
  if (name == "float8_e4m3fn") return DType::f8e4m3;
  if (name == "float8_e5m2") return DType::f8e5m2;
  if (name == "int32" || name == "int") return DType::i32;
  if (name == "int64" || name == "long") return DType::i64;
  if (name == "uint8") return DType::u8;
  return std::nullopt;
}

bool dcp_metadata_accepts(const std::string& module, const std::string& name) {
  using namespace dcp_metadata_detail;
  if (module == kMetadataModule) {
    static const std::set<std::string, std::less<>> names{
        "Metadata",         "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata",
        "TensorProperties", "_MEM_FORMAT_ENCODING",  "MetadataIndex",        "StorageMeta"};
    return names.count(name) != 0;
  }
  if (module == kShardModule) return name == "TensorProperties" || name == "MEM_FORMAT_ENCODING";
  if (module == kFilesystemModule) return name == "_StorageInfo";
  if (module == "torch") return name == "Size" || name == "strided" || torch_dtype_names().count(name) != 0;
  if (module == "torch.serialization") return name == "_get_layout";
  if (module == "collections") return name == "OrderedDict";
  // Python >= 3.11 pickles an enum member as getattr(Enum, name); the parser
  // accepts getattr only in that place, and nothing is ever called.
  if (module == "builtins") return name == "getattr";
  // StorageMeta.checkpoint_id: FileSystemWriter's path (pathlib._local from Python 3.13).
  if (module == "pathlib" || module == "pathlib._local") return name == "PosixPath" || name == "Path";
  return false;
}

DcpMetadata parse_dcp_metadata(std::string_view bytes, const std::string& source) {
  const Pickle pickle = read_pickle(bytes, dcp_metadata_accepts, source);
  return dcp_metadata_detail::Parser(source).parse(*pickle.root);
}

std::string write_dcp_metadata(const DcpMetadata& metadata, const std::string& checkpoint_id) {
  using namespace dcp_metadata_detail;
  PickleWriter pickle;
  begin_dataclass(pickle, kMetadataModule, "Metadata");
  pickle.text("state_dict_metadata").empty_dict().mark();
  for (const std::string& key : metadata.keys) {
    pickle.text(key);
    if (metadata.objects.count(key) != 0) {
      pickle.global(kMetadataModule, "BytesStorageMetadata").empty_tuple().new_object().empty_dict().build();
      continue;
    }
    const DcpTensorItem& tensor = metadata.tensors.at(key);
    begin_dataclass(pickle, kMetadataModule, "TensorStorageMetadata");
    pickle.text("properties").global(kMetadataModule, "TensorProperties").empty_tuple().new_object();
    // __getstate__'s tuple: (dtype, layout, requires_grad, _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, pin_memory).
    pickle.mark().global("torch", tensor.dtype_name).global("torch", "strided").boolean(false);
    pickle.global(kMetadataModule, "_MEM_FORMAT_ENCODING").mark().integer(0).tuple().reduce();
    pickle.boolean(false).tuple().build();
    pickle.text("size");
    pickle_size(pickle, tensor.size);
    pickle.text("chunks").empty_list().mark();
    for (const DcpChunk& chunk : tensor.chunks) {
      begin_dataclass(pickle, kMetadataModule, "ChunkStorageMetadata");
      pickle.text("offsets");
      pickle_size(pickle, chunk.offsets);
      pickle.text("sizes");
      pickle_size(pickle, chunk.sizes);
      end_dataclass(pickle);
    }
    pickle.append_items();
    end_dataclass(pickle);
  }
  pickle.set_items();
  pickle.text("planner_data").empty_dict().mark();
  for (const std::string& key : metadata.keys) {
    pickle.text(key);
    pickle_planner_path(pickle, key);
  }
  pickle.set_items();
  pickle.text("storage_data").empty_dict().mark();
  for (const std::string& key : metadata.keys) {
    if (const auto object = metadata.objects.find(key); object != metadata.objects.end()) {
      pickle_index(pickle, key, nullptr, -1);
      pickle_storage(pickle, object->second);
      continue;
    }
    const DcpTensorItem& tensor = metadata.tensors.at(key);
    for (size_t i = 0; i < tensor.chunks.size(); ++i) {
      pickle_index(pickle, key, &tensor.chunks[i].offsets, static_cast<int64_t>(i));
      pickle_storage(pickle, tensor.chunks[i].storage);
    }
  }
  pickle.set_items();
  pickle.text("storage_meta");
  begin_dataclass(pickle, kMetadataModule, "StorageMeta");
  pickle.text("checkpoint_id").text(checkpoint_id).text("save_id").none().text("load_id").none();
  pickle.text("modules").empty_list();
  end_dataclass(pickle);
  pickle.text("version").text(metadata.version.empty() ? "1.0.0" : metadata.version);
  end_dataclass(pickle);
  return pickle.finish();
}

}  // namespace titan::checkpoint
