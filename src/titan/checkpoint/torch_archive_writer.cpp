#include "titan/checkpoint/torch_archive_writer.h"

#include <fstream>

#include "titan/checkpoint/zip_writer.h"
#include "titan/core/error.h"

namespace titan::checkpoint {

namespace torch_archive_writer_detail {

// torch.save's archive name when it writes into a stream rather than a named file.
constexpr const char* kArchive = "archive";
// The serialization format version torch.save records (3: storages as typed records).
constexpr const char* kFormatVersion = "3\n";

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

void pickle_shape(PickleWriter& pickle, const Shape& values) {
  pickle.mark();
  for (int64_t v : values) pickle.integer(v);
  pickle.tuple();
}

// The members every archive ends with, after its storages.
void write_archive(ZipWriter& zip, const std::string& data_pkl, const std::vector<Tensor>& storages) {
  const std::string root = kArchive;
  zip.add(root + "/data.pkl", data_pkl.data(), data_pkl.size());
  const std::string byteorder = "little";
  zip.add(root + "/byteorder", byteorder.data(), byteorder.size());
  for (size_t key = 0; key < storages.size(); ++key) {
    zip.add(root + "/data/" + std::to_string(key), storages[key].data_ptr(), storages[key].nbytes());
  }
  zip.add(root + "/version", kFormatVersion, std::char_traits<char>::length(kFormatVersion));
}

Tensor host_contiguous(const Tensor& tensor) {
  Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
  return host.is_contiguous() && host.storage_offset() == 0 ? host : host.contiguous();
}

}  // namespace torch_archive_writer_detail

using namespace torch_archive_writer_detail;

const char* torch_storage_class(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "FloatStorage";
    case DType::bf16:
      return "BFloat16Storage";
    case DType::f16:
      return "HalfStorage";
    case DType::f8e4m3:
      return "Float8_e4m3fnStorage";
    case DType::f8e5m2:
      return "Float8_e5m2Storage";
    case DType::i32:
      return "IntStorage";
    case DType::i64:
      return "LongStorage";
    case DType::u8:
      return "ByteStorage";
  }
  fail("torch_storage_class: unknown dtype");
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    case DType::f8e4m3:
      return "float8_e4m3fn";
    case DType::f8e5m2:
      return "float8_e5m2";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::u8:
      return "uint8";
  }
  fail("torch_dtype_name: unknown dtype");
}

void pickle_torch_tensor(PickleWriter& pickle, DType dtype, const Shape& shape, const std::string& key) {
  pickle.global("torch._utils", "_rebuild_tensor_v2");
  pickle.mark();
  // The storage: persistent id ('storage', torch.<Type>Storage, key, location, element count).
  pickle.mark();
  pickle.text("storage").global("torch", torch_storage_class(dtype)).text(key).text("cpu").integer(shape_numel(shape));
  pickle.tuple().persistent_id();
  pickle.integer(0);  // storage offset
  pickle_shape(pickle, shape);
  pickle_shape(pickle, contiguous_strides(shape));
  pickle.boolean(false);                                               // requires_grad
  pickle.global("collections", "OrderedDict").empty_tuple().reduce();  // backward hooks
  pickle.tuple().reduce();
}

uint64_t write_torch_tensor(std::ostream& out, const Tensor& tensor, const std::string& source) {
  const Tensor host = host_contiguous(tensor);
  PickleWriter pickle;
  pickle_torch_tensor(pickle, host.dtype(), host.shape(), "0");
  ZipWriter zip(out, source);
  write_archive(zip, pickle.finish(), {host});
  return zip.finish();
}

uint64_t write_torch_object(std::ostream& out, const std::string& data_pkl, const std::string& source) {
  ZipWriter zip(out, source);
  write_archive(zip, data_pkl, {});
  return zip.finish();
}

void write_torch_state_dict(const std::string& path, const NamedTensors& tensors) {
  std::vector<Tensor> storages;
  PickleWriter pickle;
  pickle.global("collections", "OrderedDict").empty_tuple().reduce();
  pickle.mark();
  for (const auto& [name, tensor] : tensors) {
    storages.push_back(host_contiguous(tensor));
    pickle.text(name);
    pickle_torch_tensor(pickle, tensor.dtype(), tensor.shape(), std::to_string(storages.size() - 1));
  }
  pickle.set_items();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TITAN_CHECK(out.is_open(), "{}: cannot create the file", path);
  ZipWriter zip(out, path);
  write_archive(zip, pickle.finish(), storages);
  zip.finish();
}

}  // namespace titan::checkpoint
