#include "titan/train/flux/flux_dataset.h"

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "titan/checkpoint/safetensors.h"
#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/data/file_io.h"

namespace titan::train::flux {
namespace {

namespace fs = std::filesystem;
using comm::MeshDim;

constexpr const char* kFormat = "titan-flux-latents";
constexpr int kVersion = 1;

std::string shard_name(const std::string& split, size_t index) {
  return fmt::format("{}-{:05d}.safetensors", split, index);
}

// Writes through a temporary name, renamed into place.
void write_tensors_atomic(const fs::path& path, const checkpoint::NamedTensors& tensors,
                          const std::map<std::string, std::string>& metadata = {}) {
  const fs::path temporary = path.string() + ".tmp";
  checkpoint::write_safetensors(temporary.string(), tensors, metadata);
  fs::rename(temporary, path);
}

nlohmann::json write_split(const fs::path& folder, const std::string& split, const FluxExamples& examples,
                           int64_t shard_examples) {
  nlohmann::json shards = nlohmann::json::array();
  for (int64_t start = 0; start < examples.size(); start += shard_examples) {
    const int64_t n = std::min(shard_examples, examples.size() - start);
    const std::string name = shard_name(split, shards.size());
    const std::vector<std::string> captions(examples.captions.begin() + start, examples.captions.begin() + start + n);
    write_tensors_atomic(folder / name,
                         {{"latents", examples.latents.narrow(0, start, n).contiguous()},
                          {"t5", examples.t5.narrow(0, start, n).contiguous()},
                          {"clip", examples.clip.narrow(0, start, n).contiguous()}},
                         {{"captions", nlohmann::json(captions).dump()}});
    shards.push_back({{"file", name}, {"examples", n}});
  }
  return {{"examples", examples.size()}, {"shards", shards}};
}

// A tensor of a shard, checked against the shape the manifest promises (the
// example count aside).
Tensor read_checked(const checkpoint::SafetensorsReader& reader, const std::string& name, int64_t examples,
                    const std::vector<int64_t>& per_example) {
  TITAN_CHECK(reader.contains(name), "{}: no tensor '{}' (a prepared FLUX shard holds latents, t5 and clip)",
              reader.path(), name);
  Tensor tensor = reader.read(name).to(DType::f32);
  Shape expected{examples};
  expected.insert(expected.end(), per_example.begin(), per_example.end());
  TITAN_CHECK(tensor.shape() == expected, "{}: '{}' is {}, the manifest says {}", reader.path(), name,
              shape_str(tensor.shape()), shape_str(expected));
  return tensor;
}

FluxExamples read_split(const fs::path& folder, const nlohmann::json& split, const nlohmann::json& shapes) {
  FluxExamples out;
  std::vector<Tensor> latents, t5, clip;
  const auto latent_shape = shapes.at("latents").get<std::vector<int64_t>>();
  const auto t5_shape = shapes.at("t5").get<std::vector<int64_t>>();
  const auto clip_shape = shapes.at("clip").get<std::vector<int64_t>>();
  for (const nlohmann::json& shard : split.at("shards")) {
    const fs::path path = folder / shard.at("file").get<std::string>();
    TITAN_CHECK(path.parent_path() == folder && fs::is_regular_file(path),
                "{}: shard {} is missing (the manifest lists it)", folder.string(), path.string());
    const checkpoint::SafetensorsReader reader(path.string());
    const int64_t n = shard.at("examples").get<int64_t>();
    TITAN_CHECK(n > 0, "{}: a shard of {} examples", path.string(), n);
    latents.push_back(read_checked(reader, "latents", n, latent_shape));
    t5.push_back(read_checked(reader, "t5", n, t5_shape));
    clip.push_back(read_checked(reader, "clip", n, clip_shape));
    const auto& metadata = reader.header().metadata;
    const auto found = metadata.find("captions");
    TITAN_CHECK(found != metadata.end(), "{}: no captions in its metadata", path.string());
    nlohmann::json captions;
    try {
      captions = nlohmann::json::parse(found->second);
    } catch (const nlohmann::json::exception& error) {
      fail("{}: captions metadata is not JSON: {}", path.string(), error.what());
    }
    TITAN_CHECK(captions.is_array() && static_cast<int64_t>(captions.size()) == n,
                "{}: captions metadata must be a list of {} strings", path.string(), n);
    for (const nlohmann::json& caption : captions) {
      TITAN_CHECK(caption.is_string(), "{}: a caption is not a string", path.string());
      out.captions.push_back(caption.get<std::string>());
    }
  }
  TITAN_CHECK(static_cast<int64_t>(out.captions.size()) == split.at("examples").get<int64_t>(),
              "{}: the shards hold {} examples, the manifest says {}", folder.string(), out.captions.size(),
              split.at("examples").get<int64_t>());
  if (latents.empty()) return out;
  out.latents = concat_rows(latents);
  out.t5 = concat_rows(t5);
  out.clip = concat_rows(clip);
  return out;
}

// Rows `indices` of `tensor`, stacked.
Tensor gather_rows(const Tensor& tensor, const std::vector<int64_t>& indices) {
  Shape shape = tensor.shape();
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = Tensor::empty(shape);
  for (size_t i = 0; i < indices.size(); ++i)
    copy_(out.narrow(0, static_cast<int64_t>(i), 1), tensor.narrow(0, indices[i], 1));
  return out;
}

FluxBatch batch_of(const FluxExamples& examples, const std::vector<int64_t>& indices) {
  return {gather_rows(examples.latents, indices), gather_rows(examples.t5, indices),
          gather_rows(examples.clip, indices)};
}

// A Fisher-Yates order of n examples for an epoch, from a 64-bit Mersenne
// twister (its output is fixed by the standard, unlike the distributions').
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::mt19937_64 engine(seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(epoch));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[engine() % static_cast<uint64_t>(i + 1)]);
  return order;
}

}  // namespace

Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& part : parts) rows += part.size(0);
  Shape shape = parts.front().shape();
  shape[0] = rows;
  Tensor all = Tensor::empty(shape, parts.front().dtype());
  int64_t at = 0;
  for (const Tensor& part : parts) {
    copy_(all.narrow(0, at, part.size(0)), part);
    at += part.size(0);
  }
  return all;
}

void write_flux_dataset(const std::string& folder, const FluxDataset& dataset, int64_t shard_examples) {
  TITAN_CHECK(shard_examples > 0, "write_flux_dataset: shard_examples must be > 0");
  TITAN_CHECK(dataset.train.size() > 0, "{}: a FLUX dataset needs training examples", folder);
  const fs::path root(folder);
  fs::create_directories(root);
  write_tensors_atomic(root / "empty_prompt.safetensors", {{"t5", dataset.empty_t5}, {"clip", dataset.empty_clip}});
  const Tensor& latents = dataset.train.latents;
  nlohmann::json manifest = {{"format", kFormat},
                             {"version", kVersion},
                             {"img_size", dataset.img_size},
                             {"encoders_fingerprint", dataset.encoders_fingerprint},
                             {"shapes",
                              {{"latents", std::vector<int64_t>{latents.size(1), latents.size(2), latents.size(3)}},
                               {"t5", dataset.empty_t5.shape()},
                               {"clip", dataset.empty_clip.shape()}}},
                             {"splits",
                              {{"train", write_split(root, "train", dataset.train, shard_examples)},
                               {"validation", write_split(root, "validation", dataset.validation, shard_examples)}}}};
  data::write_file_atomic(root / "manifest.json", manifest.dump(2) + "\n");
}

bool is_flux_dataset(const std::string& folder) {
  const fs::path manifest = fs::path(folder) / "manifest.json";
  if (!fs::is_regular_file(manifest)) return false;
  try {
    const nlohmann::json json = nlohmann::json::parse(data::read_file(manifest, "dataset manifest"));
    return json.is_object() && json.value("format", "") == kFormat;
  } catch (const std::exception&) {
    return false;
  }
}

FluxDataset read_flux_dataset(const std::string& folder) {
  const fs::path root(folder);
  const fs::path manifest_path = root / "manifest.json";
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(data::read_file(manifest_path, "FLUX dataset manifest"));
  } catch (const nlohmann::json::exception& error) {
    fail("{}: not JSON: {}", manifest_path.string(), error.what());
  }
  TITAN_CHECK(manifest.is_object() && manifest.value("format", "") == kFormat,
              "{}: not a prepared FLUX dataset (format must be \"{}\"; titan data prepare --images writes one)",
              manifest_path.string(), kFormat);
  TITAN_CHECK(manifest.value("version", 0) == kVersion, "{}: version {} is not {}", manifest_path.string(),
              manifest.value("version", 0), kVersion);
  FluxDataset dataset;
  try {
    dataset.img_size = manifest.at("img_size").get<int64_t>();
    dataset.encoders_fingerprint = manifest.at("encoders_fingerprint").get<std::string>();
    const nlohmann::json& shapes = manifest.at("shapes");
    const checkpoint::SafetensorsReader empty((root / "empty_prompt.safetensors").string());
    dataset.empty_t5 =
        read_checked(empty, "t5", shapes.at("t5").at(0).get<int64_t>(), {shapes.at("t5").at(1).get<int64_t>()});
    dataset.empty_clip = read_checked(empty, "clip", shapes.at("clip").at(0).get<int64_t>(), {});
    dataset.train = read_split(root, manifest.at("splits").at("train"), shapes);
    dataset.validation = read_split(root, manifest.at("splits").at("validation"), shapes);
  } catch (const nlohmann::json::exception& error) {
    fail("{}: {}", manifest_path.string(), error.what());
  }
  TITAN_CHECK(dataset.train.size() > 0, "{}: no training examples", folder);
  return dataset;
}

FluxSplit split_of(const FluxExamples& examples) {
  const auto shared = std::make_shared<const FluxExamples>(examples);
  return {examples.size(), [shared](const std::vector<int64_t>& indices) { return batch_of(*shared, indices); },
          examples.captions};
}

FluxData flux_data(const FluxDataset& dataset, const JobConfig& config, const comm::DeviceMesh& mesh) {
  TITAN_CHECK(dataset.img_size == config.training.img_size,
              "training.img_size {} differs from the prepared dataset's {} (training.dataset_path {})",
              config.training.img_size, dataset.img_size, config.training.dataset_path);
  return flux_data(
      FluxSource{split_of(dataset.train), split_of(dataset.validation), dataset.empty_t5, dataset.empty_clip}, config,
      mesh);
}

FluxData flux_data(const FluxSource& source, const JobConfig& config, const comm::DeviceMesh& mesh) {
  TITAN_CHECK(source.train.size > 0, "flux: the job has no training examples (training.dataset_path {})",
              config.training.dataset_path);
  const int64_t ranks = mesh.size(MeshDim::dp), rank = mesh.coordinate(MeshDim::dp);
  const int64_t local = config.training.local_batch_size;
  const auto train = std::make_shared<FluxSplit>(source.train);
  const auto validation = std::make_shared<FluxSplit>(source.validation);
  const auto seed = static_cast<uint64_t>(config.training.seed);
  struct Cursor {
    int64_t batches = 0;  // training batches drawn
    int64_t epoch = -1;
    std::vector<int64_t> order;
    int64_t validation_batches = 0;
  };
  const auto cursor = std::make_shared<Cursor>();
  FluxData data;
  data.train = [=] {
    std::vector<int64_t> indices;
    const int64_t first = (cursor->batches * ranks + rank) * local;
    for (int64_t i = 0; i < local; ++i) {
      const int64_t global = first + i;
      const int64_t epoch = global / train->size;
      if (epoch != cursor->epoch) {
        cursor->order = epoch_order(train->size, seed, epoch);
        cursor->epoch = epoch;
      }
      indices.push_back(cursor->order[static_cast<size_t>(global % train->size)]);
    }
    ++cursor->batches;
    FluxBatch batch = train->batch(indices);
    batch.first_example = first;
    return batch;
  };
  data.seek_train = [cursor](int64_t batches) { cursor->batches = batches; };
  if (validation->size > 0) {
    data.reset_validation = [cursor] { cursor->validation_batches = 0; };
    // Every rank runs the same number of batches of the same size (FSDP
    // gathers in each forward): the split ends for all at once, and the last
    // batch wraps around to the split's start.
    data.validation = [=] {
      const int64_t first = cursor->validation_batches * ranks * local;
      if (first >= validation->size) return FluxBatch{};
      std::vector<int64_t> indices;
      for (int64_t i = 0; i < local; ++i) indices.push_back((first + rank * local + i) % validation->size);
      ++cursor->validation_batches;
      FluxBatch batch = validation->batch(indices);
      batch.first_example = first + rank * local;
      return batch;
    };
  }
  data.empty_t5 = source.empty_t5;
  data.empty_clip = source.empty_clip;
  // The validation images' prompts: the first of the split (or of training without one).
  const FluxSplit& prompts_from = validation->size > 0 ? *validation : *train;
  const int64_t wanted = config.validation.save_img_count < 0 ? prompts_from.size : config.validation.save_img_count;
  const int64_t prompts = std::min<int64_t>(prompts_from.size, wanted);
  if (prompts > 0) {
    std::vector<int64_t> first(static_cast<size_t>(prompts));
    for (int64_t i = 0; i < prompts; ++i) first[static_cast<size_t>(i)] = i;
    data.image_prompts = prompts_from.batch(first);
    data.image_captions.assign(prompts_from.captions.begin(), prompts_from.captions.begin() + prompts);
  }
  return data;
}

}  // namespace titan::train::flux
