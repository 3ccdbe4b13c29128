// A prepared FLUX dataset: every image encoded once by the autoencoder and
// every caption once by T5 and CLIP (titan data prepare --images), so that
// training reads tensors instead of running the frozen encoders each step.
//
// Folder layout (written by write_flux_dataset, read by read_flux_dataset):
//   manifest.json            format, version, image size, the tensors'
//                            shapes, the encoders' fingerprint, each split's
//                            examples and shard files (written last: a
//                            folder without it is not a dataset)
//   empty_prompt.safetensors the empty caption's "t5" [Lt, d] and "clip" [d]
//   <split>-NNNNN.safetensors "latents" [n, C, h, w], "t5" [n, Lt, d],
//                            "clip" [n, d], f32; the captions in its metadata
// Every file is written under a temporary name and renamed into place.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "titan/comm/device_mesh.h"
#include "titan/core/tensor.h"
#include "titan/train/flux/flux_trainer.h"
#include "titan/train/job_config.h"

namespace titan::train::flux {

// One split's examples, stacked.
struct FluxExamples {
  Tensor latents;  // [N, C, h, w] f32
  Tensor t5;       // [N, Lt, d] f32
  Tensor clip;     // [N, d] f32
  std::vector<std::string> captions;
  int64_t size() const { return latents.defined() ? latents.size(0) : 0; }
};

struct FluxDataset {
  int64_t img_size = 0;
  // What produced the encodings: the encoders' identities (paths, sizes of
  // their weights, their configs), hashed; a job whose encoders differ is refused.
  std::string encoders_fingerprint;
  FluxExamples train, validation;
  Tensor empty_t5, empty_clip;  // [Lt, d], [d]
};

// `parts` ([n_i, ...], the same trailing shape and dtype) stacked along their first dimension.
Tensor concat_rows(const std::vector<Tensor>& parts);

// Writes `dataset` to `folder` (created; an existing dataset there is replaced
// file by file, the manifest last). `shard_examples`: examples per shard file.
void write_flux_dataset(const std::string& folder, const FluxDataset& dataset, int64_t shard_examples = 1024);
// Reads a prepared folder; errors name the folder, the file and what is wrong.
FluxDataset read_flux_dataset(const std::string& folder);
// Whether `folder` holds a prepared FLUX dataset (its manifest says so).
bool is_flux_dataset(const std::string& folder);

// A split's examples by index: stacked in memory (a prepared dataset), or
// encoded when a batch asks for them (training on the fly).
struct FluxSplit {
  int64_t size = 0;
  std::function<FluxBatch(const std::vector<int64_t>& indices)> batch;  // rows `indices`, in that order
  std::vector<std::string> captions;
};
FluxSplit split_of(const FluxExamples& examples);

// What a job's batches are drawn from.
struct FluxSource {
  FluxSplit train, validation;
  Tensor empty_t5, empty_clip;  // [Lt, d], [d]
};

// The job's batches from `source` for this rank: training examples in a
// seeded order reshuffled each epoch, each data-parallel rank taking its own
// local_batch_size of each global batch; validation examples in order, cut
// among the ranks.
FluxData flux_data(const FluxSource& source, const JobConfig& config, const comm::DeviceMesh& mesh);
// A prepared dataset's, after checking training.img_size against the dataset's.
FluxData flux_data(const FluxDataset& dataset, const JobConfig& config, const comm::DeviceMesh& mesh);

}  // namespace titan::train::flux
