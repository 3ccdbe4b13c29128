// The paths a training job reads and writes, checked before anything is
// built: an output that cannot be used (a checkpoint folder that is a file,
// metrics.jsonl that is a folder) fails at start-up naming its key, not at the
// first save after an hour of training; and an output that is, holds or lies
// inside something the job reads (the dataset, the tokenizer, the model's
// config.json, the initial weights, the chat template) is refused, since
// writing it would destroy or pollute that input.
#pragma once

#include "titan/train/job_config.h"

namespace titan::train {

// Outputs against inputs; nothing is created. Every rank, before the dump folder's lock.
void check_outputs_apart_from_inputs(const JobConfig& config);

// checkpoint.initial_load_path against the keys saying what it holds: with
// checkpoint.initial_load_in_hf a Hugging Face folder; with
// initial_load_model_only = false a titan checkpoint step folder (not an HF
// folder or a model export, which hold weights only, nor a TorchTitan DCP
// checkpoint, whose weights only are read). Every rank, before the model is
// built.
void check_initial_load_path(const JobConfig& config);

// Rank 0, once the dump folder exists (its lock creates it): creates the
// output folders the job will use and opens metrics.jsonl for appending, so a
// file or an unwritable folder in the way is found now.
void prepare_output_paths(const JobConfig& config);

}  // namespace titan::train
