#include "titan/models/hf/hf_weights.h"

#include <fmt/ranges.h>

#include "titan/core/copy.h"
#include "titan/models/decoder_config_diff.h"
#include "titan/models/hf/hf_folder.h"

namespace titan::models {

namespace {

// Where the rows of one titan tensor are in the folder: one HF tensor from
// `first_row` on (a tensor of its own, or a part of a fused one), or, for a
// stack of experts, expert e's whole HF tensor at tensors[e].
struct HfRows {
  std::string hf_name;
  int64_t first_row = 0;
};
struct TitanSource {
  bool stacked_experts = false;
  std::vector<HfRows> tensors;
};

std::map<std::string, TitanSource> sources_of_titan_tensors(const HfWeightPlan& weights) {
  std::map<std::string, TitanSource> sources;
  for (const HfTensorPlan& plan : weights.tensors) {
    int64_t row = 0;
    for (const HfTensorPart& part : plan.parts) {
      TitanSource& source = sources[part.titan_name];
      source.stacked_experts = part.expert >= 0;
      const size_t at = part.expert >= 0 ? static_cast<size_t>(part.expert) : 0;
      if (source.tensors.size() <= at) source.tensors.resize(at + 1);
      source.tensors[at] = {plan.hf_name, row};
      row += hf_part_shape(part, weights.titan_shapes.at(part.titan_name))[0];
    }
  }
  return sources;
}

// The box of titan tensor `name` (`shape` at `offsets`, in titan layout) in
// the folder's dtype, read row by row where HF orders the rows differently.
Tensor read_titan_box(const HfFolderReader& reader, const std::string& name, const TitanSource& sources,
                      const Shape& offsets, const Shape& shape, const DecoderConfig& config) {
  const Shape inner_offsets(offsets.begin() + 1, offsets.end()), inner_shape(shape.begin() + 1, shape.end());
  std::vector<Tensor> pieces;  // consecutive rows of the box, each from one read
  if (sources.stacked_experts) {
    for (int64_t e = offsets[0]; e < offsets[0] + shape[0]; ++e) {
      const std::string& hf_name = sources.tensors.at(static_cast<size_t>(e)).hf_name;
      pieces.push_back(reader.read_box(hf_name, inner_offsets, inner_shape).unsqueeze(0));
    }
  } else {
    const HfRows& source = sources.tensors.front();
    Shape row_offsets = offsets, row_shape = shape;
    if (!hf_rows_permuted(name, config)) {  // rows in the same order: one box
      row_offsets[0] += source.first_row;
      return reader.read_box(source.hf_name, row_offsets, row_shape);
    }
    row_shape[0] = 1;
    for (int64_t row = offsets[0]; row < offsets[0] + shape[0]; ++row) {
      row_offsets[0] = source.first_row + hf_row_of(name, row, config);
      pieces.push_back(reader.read_box(source.hf_name, row_offsets, row_shape));
    }
  }
  if (pieces.empty()) return Tensor::empty(shape, reader.entry(sources.tensors.front().hf_name).dtype);
  const DType dtype = pieces.front().dtype();
  Tensor box = Tensor::empty(shape, dtype);
  for (size_t i = 0; i < pieces.size(); ++i) {
    TITAN_CHECK(pieces[i].dtype() == dtype, "{}: the HF tensors of '{}' differ in dtype ({} and {})", reader.folder(),
                name, dtype_name(dtype), dtype_name(pieces[i].dtype()));
    titan::copy_(box.narrow(0, static_cast<int64_t>(i), 1), pieces[i]);
  }
  return box;
}

}  // namespace

void load_hf_weights_into(models::Decoder& model, const std::string& folder) {
  const HfFolderReader reader(folder);
  const auto differences =
      models::decoder_config_differences(models::decoder_config_from_hf(reader.config()), model.config);
  TITAN_CHECK(differences.empty(), "{}/config.json describes a different model than the one built ({}: {})", folder,
              "config.json vs model", fmt::join(differences, "; "));
  const HfWeightPlan weights = plan_hf_weights(reader, model.config);
  const std::map<std::string, TitanSource> sources = sources_of_titan_tensors(weights);
  for (auto& [name, parameter] : model.named_parameters()) {
    const auto found = sources.find(name);
    if (found == sources.end()) {
      // Not a weight of the base model: a LoRA adapter, which keeps its initial values.
      TITAN_CHECK(weights.titan_shapes.count(name) == 0 && parameter->data.requires_grad(),
                  "{}: no tensor holds titan's '{}'", folder, name);
      continue;
    }
    Tensor& stored = parameter->data;
    TITAN_CHECK(parameter->layout.whole_shape(stored.shape()) == weights.titan_shapes.at(name),
                "{}: titan's '{}' is {} in the model built, {} in the folder", folder, name,
                shape_str(parameter->layout.whole_shape(stored.shape())), shape_str(weights.titan_shapes.at(name)));
    const Tensor box = read_titan_box(reader, name, found->second, parameter->layout.offsets_in_whole(stored.shape()),
                                      stored.shape(), model.config);
    titan::copy_(stored, box.to(stored.dtype()).to(stored.device()));
  }
  // Buffers an HF folder does not hold (the expert bias) start as the model initialises them: zero.
  for (auto& [name, buffer] : model.named_persistent_buffers()) titan::fill_(*buffer, 0.0);
}

}  // namespace titan::models
