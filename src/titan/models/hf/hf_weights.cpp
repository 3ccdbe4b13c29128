#include "titan/models/hf/hf_weights.h"

#include <fmt/ranges.h>

#include "titan/core/copy.h"
#include "titan/models/decoder_config_diff.h"
#include "titan/models/hf/hf_folder.h"

namespace titan::models {

HfTitanTensors::HfTitanTensors(const HfFolderReader& reader, const DecoderConfig& config)
    : reader_(reader), config_(config), weights_(plan_hf_weights(reader, config)) {
  for (size_t index = 0; index < weights_.tensors.size(); ++index) {
    const HfTensorPlan& plan = weights_.tensors[index];
    if (plan.copy) continue;  // checked equal to the first copy by plan_hf_weights
    if (plan.layout != HfTensorLayout::rows) {
      for (size_t p = 0; p < plan.parts.size(); ++p) {
        Source& source = sources_[plan.parts[p].titan_name];
        source.tensors = {{plan.hf_name, 0}};
        source.expert_plan = static_cast<int64_t>(index);
        source.part = p;
      }
      continue;
    }
    int64_t row = 0;
    for (const HfTensorPart& part : plan.parts) {
      Source& source = sources_[part.titan_name];
      source.stacked_experts = part.expert >= 0;
      const size_t at = part.expert >= 0 ? static_cast<size_t>(part.expert) : 0;
      if (source.tensors.size() <= at) source.tensors.resize(at + 1);
      source.tensors[at] = {plan.hf_name, row};
      row += hf_part_shape(part, weights_.titan_shapes.at(part.titan_name))[0];
    }
  }
}

const HfTitanTensors::Source& HfTitanTensors::source_of(const std::string& name) const {
  const auto found = sources_.find(name);
  TITAN_CHECK(found != sources_.end(), "{}: no tensor holds titan's '{}'", reader_.folder(), name);
  return found->second;
}

DType HfTitanTensors::dtype(const std::string& name) const {
  const Source& source = source_of(name);
  // MXFP4 decodes exactly into bf16 (two significant bits times a power of two).
  if (source.expert_plan >= 0 && hf_mxfp4_tensor(reader_, weights_.tensors[static_cast<size_t>(source.expert_plan)])) {
    return DType::bf16;
  }
  return reader_.entry(source.tensors.front().hf_name).dtype;
}

Tensor HfTitanTensors::read(const std::string& name) const {
  const Shape& shape = weights_.titan_shapes.at(name);
  const Source& source = source_of(name);
  if (source.expert_plan >= 0 || source.stacked_experts || !hf_rows_permuted(name, config_)) {
    return read_box(name, Shape(shape.size(), 0), shape);
  }
  // All rows of a tensor whose rows HF orders differently: one read, then the rows put in titan's order.
  Shape row_offsets(shape.size(), 0);
  row_offsets[0] = source.tensors.front().first_row;
  return from_hf_layout(name, reader_.read_box(source.tensors.front().hf_name, row_offsets, shape), config_);
}

Tensor HfTitanTensors::read_box(const std::string& name, const Shape& offsets, const Shape& shape) const {
  const Source& source = source_of(name);
  if (source.expert_plan >= 0) {
    // An expert-layout tensor is read whole (decoded, transposed, de-interleaved), then cut to the box.
    const HfTensorPlan& plan = weights_.tensors[static_cast<size_t>(source.expert_plan)];
    std::vector<Shape> part_shapes;
    for (const HfTensorPart& part : plan.parts) part_shapes.push_back(weights_.titan_shapes.at(part.titan_name));
    Tensor box =
        from_hf_joined_tensor(plan, part_shapes, read_hf_expert_tensor(reader_, plan, DType::bf16), source.part);
    TITAN_CHECK(box.shape() == weights_.titan_shapes.at(name), "{}: '{}' reads as {}, expected {}", reader_.folder(),
                name, shape_str(box.shape()), shape_str(weights_.titan_shapes.at(name)));
    for (size_t d = 0; d < shape.size(); ++d) box = box.narrow(static_cast<int64_t>(d), offsets[d], shape[d]);
    return box.contiguous();
  }
  const Shape inner_offsets(offsets.begin() + 1, offsets.end()), inner_shape(shape.begin() + 1, shape.end());
  std::vector<Tensor> pieces;  // consecutive rows of the box, each from one read
  if (source.stacked_experts) {
    for (int64_t e = offsets[0]; e < offsets[0] + shape[0]; ++e) {
      const std::string& hf_name = source.tensors.at(static_cast<size_t>(e)).hf_name;
      pieces.push_back(reader_.read_box(hf_name, inner_offsets, inner_shape).unsqueeze(0));
    }
  } else {
    const Rows& rows = source.tensors.front();
    Shape row_offsets = offsets, row_shape = shape;
    if (!hf_rows_permuted(name, config_)) {  // rows in the same order: one box
      row_offsets[0] += rows.first_row;
      return reader_.read_box(rows.hf_name, row_offsets, row_shape);
    }
    row_shape[0] = 1;
    for (int64_t row = offsets[0]; row < offsets[0] + shape[0]; ++row) {
      row_offsets[0] = rows.first_row + hf_row_of(name, row, config_);
      pieces.push_back(reader_.read_box(rows.hf_name, row_offsets, row_shape));
    }
  }
  if (pieces.empty()) return Tensor::empty(shape, dtype(name));
  const DType first = pieces.front().dtype();
  Tensor box = Tensor::empty(shape, first);
  for (size_t i = 0; i < pieces.size(); ++i) {
    TITAN_CHECK(pieces[i].dtype() == first, "{}: the HF tensors of '{}' differ in dtype ({} and {})", reader_.folder(),
                name, dtype_name(first), dtype_name(pieces[i].dtype()));
    titan::copy_(box.narrow(0, static_cast<int64_t>(i), 1), pieces[i]);
  }
  return box;
}

checkpoint::TensorSources hf_titan_sources(const HfTitanTensors& tensors, std::optional<DType> dtype) {
  checkpoint::TensorSources sources;
  const auto model = tensors.config().build(Device::meta());  // the model's order, names and shapes
  for (auto& [name, meta] : model->named_state()) {
    if (!tensors.holds(name)) {
      // Buffers an HF folder does not hold (the expert bias) start as the model initialises them: zero.
      const DType stored = meta.dtype();
      const Shape shape = meta.shape();
      sources.push_back({name, stored, shape, [stored, shape] { return Tensor::zeros(shape, stored); }});
      continue;
    }
    sources.push_back({name, dtype.value_or(tensors.dtype(name)), meta.shape(), [&tensors, titan_name = name, dtype] {
                         const Tensor tensor = tensors.read(titan_name);
                         return dtype ? tensor.to(*dtype) : tensor;
                       }});
  }
  return sources;
}

std::map<std::string, Tensor> read_hf_weights(const HfFolderReader& reader, const models::DecoderConfig& config,
                                              std::optional<DType> dtype) {
  const HfTitanTensors tensors(reader, config);
  std::map<std::string, Tensor> state;
  for (const checkpoint::TensorSource& source : hf_titan_sources(tensors, dtype)) state[source.name] = source.read();
  return state;
}

void load_hf_weights_into(models::Decoder& model, const std::string& folder) {
  const HfFolderReader reader(folder);
  const auto differences =
      models::decoder_config_differences(models::decoder_config_from_hf(reader.config()), model.config);
  TITAN_CHECK(differences.empty(), "{}/config.json describes a different model than the one built ({}: {})", folder,
              "config.json vs model", fmt::join(differences, "; "));
  const HfTitanTensors tensors(reader, model.config);
  const HfWeightPlan& weights = tensors.plan();
  for (auto& [name, parameter] : model.named_parameters()) {
    if (!tensors.holds(name)) {
      // Not a weight of the base model: a LoRA adapter, which keeps its initial values.
      TITAN_CHECK(weights.titan_shapes.count(name) == 0 && parameter->data.requires_grad(),
                  "{}: no tensor holds titan's '{}'", folder, name);
      continue;
    }
    Tensor& stored = parameter->data;
    TITAN_CHECK(parameter->layout.whole_shape(stored.shape()) == weights.titan_shapes.at(name),
                "{}: titan's '{}' is {} in the model built, {} in the folder", folder, name,
                shape_str(parameter->layout.whole_shape(stored.shape())), shape_str(weights.titan_shapes.at(name)));
    const Tensor box = tensors.read_box(name, parameter->layout.offsets_in_whole(stored.shape()), stored.shape());
    titan::copy_(stored, box.to(stored.dtype()).to(stored.device()));
  }
  // Buffers an HF folder does not hold (the expert bias, but for DeepSeek-V3's) start as the model initialises
  // them: zero.
  for (auto& [name, buffer] : model.named_persistent_buffers()) {
    if (!tensors.holds(name)) {
      titan::fill_(*buffer, 0.0);
      continue;
    }
    const Tensor whole = tensors.read_box(name, Shape(buffer->shape().size(), 0), buffer->shape());
    titan::copy_(*buffer, whole.to(buffer->dtype()).to(buffer->device()));
  }
}

}  // namespace titan::models
