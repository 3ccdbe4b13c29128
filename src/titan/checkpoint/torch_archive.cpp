#include "titan/checkpoint/torch_archive.h"

#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <limits>
#include <set>

#include "titan/checkpoint/pickle_reader.h"
#include "titan/checkpoint/zip_reader.h"
#include "titan/core/error.h"

namespace titan::checkpoint {

namespace {

// torch.<Name>Storage -> the dtype its elements have; nullopt-like DType::u8 with
// `known` false for storages titan has no dtype for (double, bool, ...).
struct StorageType {
  const char* name;
  DType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", DType::f32}, {"BFloat16Storage", DType::bf16}, {"HalfStorage", DType::f16},
    {"IntStorage", DType::i32},   {"LongStorage", DType::i64},      {"ByteStorage", DType::u8},
};
// Storages torch writes that titan names in errors rather than refusing as unknown globals.
const std::set<std::string> kUnreadStorages = {"DoubleStorage", "BoolStorage",         "CharStorage",
                                               "ShortStorage",  "ComplexFloatStorage", "ComplexDoubleStorage",
                                               "UntypedStorage"};
const std::set<std::string> kTorchDtypes = {"float32", "float",  "bfloat16", "float16", "half",
                                            "float64", "double", "int64",    "long",    "int32",
                                            "int",     "int16",  "int8",     "uint8",   "bool"};

bool accepted_global(const std::string& module, const std::string& name) {
  if (module == "collections") return name == "OrderedDict";
  if (module == "torch._utils") {
    return name == "_rebuild_tensor_v2" || name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state";
  }
  if (module == "torch") {
    for (const StorageType& type : kStorageTypes) {
      if (name == type.name) return true;
    }
    return kUnreadStorages.count(name) != 0 || kTorchDtypes.count(name) != 0 || name == "Size";
  }
  return false;
}

int64_t integer_of(const PickleValue* value, const std::string& source, const char* what) {
  TITAN_CHECK(value != nullptr && value->kind == PickleKind::integer, "{}: a tensor's {} is a {}, not an integer",
              source, what, value == nullptr ? "missing value" : value->describe());
  return value->integer;
}

std::vector<int64_t> integers_of(const PickleValue* value, const std::string& source, const char* what) {
  // torch.Size(tuple) appears in some writers; tuples in torch.save's own.
  if (value != nullptr && value->is_object_of("torch", "Size") && value->arguments->items.size() == 1) {
    value = value->arguments->items[0];
  }
  TITAN_CHECK(value != nullptr && (value->kind == PickleKind::tuple || value->kind == PickleKind::list),
              "{}: a tensor's {} is a {}, not a tuple", source, what,
              value == nullptr ? "missing value" : value->describe());
  std::vector<int64_t> out;
  for (const PickleValue* item : value->items) out.push_back(integer_of(item, source, what));
  return out;
}

}  // namespace

bool TorchTensorRecord::contiguous() const {
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

uint64_t TorchTensorRecord::begin() const {
  return storage_begin + static_cast<uint64_t>(storage_offset) * dtype_size(dtype);
}

uint64_t TorchTensorRecord::end() const {
  return begin() + static_cast<uint64_t>(shape_numel(Shape(shape.begin(), shape.end()))) * dtype_size(dtype);
}

TorchArchive::TorchArchive(std::string path, uint64_t offset, uint64_t length) : path_(std::move(path)) {
  zip_ = std::make_unique<ZipReader>(path_, offset, length);
  const ZipMember* data = nullptr;
  for (const ZipMember& member : zip_->members()) {
    const size_t slash = member.name.find('/');
    if (slash != std::string::npos && member.name.substr(slash) == "/data.pkl") {
      TITAN_CHECK(data == nullptr, "{}: two data.pkl records in one torch.save archive", path_);
      data = &member;
      prefix_ = member.name.substr(0, slash + 1);
    }
  }
  TITAN_CHECK(data != nullptr, "{}: a zip archive without <name>/data.pkl (not a torch.save file)", path_);
  TITAN_CHECK(data->size <= (uint64_t{1} << 30), "{}: data.pkl of {} bytes is too large", path_, data->size);
  if (const ZipMember* order = zip_->find(prefix_ + "byteorder")) {
    TITAN_CHECK(zip_->read(*order) == "little", "{}: saved big-endian (titan reads little-endian torch.save files)",
                path_);
  }
  const std::string bytes = zip_->read(*data);
  pickle_ = read_pickle(bytes, accepted_global, path_ + " (data.pkl)");
}

TorchArchive::~TorchArchive() = default;

bool TorchArchive::is_tensor(const PickleValue& value) const {
  return value.is_object_of("torch._utils", "_rebuild_tensor_v2") ||
         value.is_object_of("torch._utils", "_rebuild_parameter") ||
         value.is_object_of("torch._utils", "_rebuild_parameter_with_state");
}

TorchTensorRecord TorchArchive::tensor_record(const PickleValue& value) const {
  const PickleValue* tensor = &value;
  // A Parameter wraps its tensor: _rebuild_parameter(data, requires_grad, hooks[, state]).
  if (!tensor->is_object_of("torch._utils", "_rebuild_tensor_v2")) {
    TITAN_CHECK(is_tensor(*tensor) && !tensor->arguments->items.empty(), "{}: a {} where a tensor was expected", path_,
                tensor->describe());
    tensor = tensor->arguments->items[0];
    TITAN_CHECK(tensor->is_object_of("torch._utils", "_rebuild_tensor_v2"), "{}: a Parameter holding a {}", path_,
                tensor->describe());
  }
  const std::vector<const PickleValue*>& args = tensor->arguments->items;
  TITAN_CHECK(args.size() >= 4, "{}: _rebuild_tensor_v2 with {} arguments", path_, args.size());
  const PickleValue* storage = args[0];
  TITAN_CHECK(storage->kind == PickleKind::persistent && storage->items.size() == 1,
              "{}: a tensor whose storage is "
              "a {}, not a persistent reference",
              path_, storage->describe());
  const PickleValue* id = storage->items[0];
  TITAN_CHECK(id->kind == PickleKind::tuple && id->items.size() == 5 && id->items[0]->kind == PickleKind::text &&
                  id->items[0]->text == "storage" && id->items[1]->kind == PickleKind::global &&
                  id->items[2]->kind == PickleKind::text,
              "{}: a storage reference titan does not read", path_);
  TorchTensorRecord record;
  const std::string& type = id->items[1]->name;
  bool known = false;
  for (const StorageType& candidate : kStorageTypes) {
    if (type == candidate.name) {
      record.dtype = candidate.dtype;
      known = true;
    }
  }
  TITAN_CHECK(known, "{}: a tensor stored as torch.{}, a dtype titan does not hold", path_, type);
  record.storage_key = id->items[2]->text;
  const int64_t storage_numel = integer_of(id->items[4], path_, "storage size");
  record.storage_offset = integer_of(args[1], path_, "storage offset");
  record.shape = integers_of(args[2], path_, "shape");
  record.strides = integers_of(args[3], path_, "strides");
  TITAN_CHECK(record.shape.size() == record.strides.size() && record.shape.size() <= 8,
              "{}: a tensor with {} dims and {} strides", path_, record.shape.size(), record.strides.size());
  const ZipMember* member = zip_->find(prefix_ + "data/" + record.storage_key);
  TITAN_CHECK(member != nullptr, "{}: storage '{}' is missing from the archive", path_, record.storage_key);
  const uint64_t element = dtype_size(record.dtype);
  TITAN_CHECK(storage_numel >= 0 && static_cast<uint64_t>(storage_numel) <= member->size / element,
              "{}: storage '{}' claims {} elements but holds {} bytes", path_, record.storage_key, storage_numel,
              member->size);
  record.storage_begin = member->begin;
  record.storage_bytes = static_cast<uint64_t>(storage_numel) * element;
  // Every element the view reaches lies in the storage (no overflow on the way).
  int64_t last = record.storage_offset, numel = 1;
  TITAN_CHECK(last >= 0, "{}: a negative storage offset", path_);
  for (size_t d = 0; d < record.shape.size(); ++d) {
    const int64_t size = record.shape[d], stride = record.strides[d];
    TITAN_CHECK(size >= 0 && stride >= 0 && size <= std::numeric_limits<int32_t>::max() &&
                    stride <= std::numeric_limits<int32_t>::max(),
                "{}: a tensor of shape {} and strides {} titan does not read", path_, shape_str(record.shape),
                shape_str(record.strides));
    if (size == 0) numel = 0;
    if (size > 0) last += (size - 1) * stride;
    TITAN_CHECK(numel == 0 || numel <= std::numeric_limits<int64_t>::max() / std::max<int64_t>(size, 1),
                "{}: a tensor too large", path_);
    numel *= size;
  }
  TITAN_CHECK(numel == 0 || last < storage_numel,
              "{}: a tensor of shape {} at offset {} reaches past its storage "
              "'{}' of {} elements",
              path_, shape_str(record.shape), record.storage_offset, record.storage_key, storage_numel);
  return record;
}

Tensor TorchArchive::read_record(const TorchTensorRecord& record) const {
  Tensor out = Tensor::empty(Shape(record.shape.begin(), record.shape.end()), record.dtype);
  if (out.numel() == 0) return out;
  const size_t element = dtype_size(record.dtype);
  if (record.contiguous()) {
    zip_->read_at(record.begin(), record.end() - record.begin(), out.data_ptr());
    return out;
  }
  // A strided view: read its storage and gather.
  std::string storage(static_cast<size_t>(record.storage_bytes), '\0');
  zip_->read_at(record.storage_begin, record.storage_bytes, storage.data());
  auto* to = static_cast<char*>(out.data_ptr());
  std::vector<int64_t> index(record.shape.size(), 0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t at = record.storage_offset;
    for (size_t d = 0; d < index.size(); ++d) at += index[d] * record.strides[d];
    std::memcpy(to + static_cast<size_t>(i) * element, storage.data() + static_cast<size_t>(at) * element, element);
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < record.shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

namespace {

constexpr int kMaxStateDictDepth = 16;

std::string key_text(const PickleValue& key, const std::string& source) {
  if (key.kind == PickleKind::text) return key.text;
  if (key.kind == PickleKind::integer) return std::to_string(key.integer);  // optimizer state is keyed by index
  fail("{}: a state dict key that is a {}, not a string", source, key.describe());
}

}  // namespace

std::vector<std::pair<std::string, TorchTensorRecord>> TorchArchive::state_dict_tensors() const {
  std::vector<std::pair<std::string, TorchTensorRecord>> out;
  std::set<std::string> seen;
  const std::function<void(const PickleValue&, const std::string&, int)> visit =
      [&](const PickleValue& value, const std::string& name, int depth) {
        if (is_tensor(value)) {
          TITAN_CHECK(seen.insert(name).second, "{}: tensor '{}' appears twice", path_, name);
          out.emplace_back(name, tensor_record(value));
          return;
        }
        const bool is_dict = value.kind == PickleKind::dict || value.is_object_of("collections", "OrderedDict");
        if (!is_dict) return;  // numbers, strings, lists of settings: not tensors
        TITAN_CHECK(depth < kMaxStateDictDepth, "{}: state dict nested deeper than {}", path_, kMaxStateDictDepth);
        for (const auto& [key, item] : value.entries) {
          const std::string text = key_text(*key, path_);
          visit(*item, name.empty() ? text : name + "." + text, depth + 1);
        }
      };
  visit(root(), "", 0);
  return out;
}

SafetensorsHeader TorchArchive::as_safetensors_header() const {
  SafetensorsHeader header;
  header.data_offset = 0;
  for (const auto& [name, record] : state_dict_tensors()) {
    TITAN_CHECK(record.contiguous(),
                "{}: tensor '{}' is stored as a strided view (shape {}, strides {}), which "
                "titan reads only whole (re-save it contiguous)",
                path_, name, shape_str(record.shape), shape_str(record.strides));
    SafetensorsEntry entry;
    entry.name = name;
    entry.dtype = record.dtype;
    entry.shape = record.shape;
    entry.begin = record.begin();
    entry.end = record.end();
    header.entries.push_back(std::move(entry));
  }
  return header;
}

}  // namespace titan::checkpoint
