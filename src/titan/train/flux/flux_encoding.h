// Captioned images through a job's frozen encoders: all at once (what `titan
// data prepare` writes), or a batch at a time when training asks for it
// (training on the fly: training.dataset_path names a captions.jsonl).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "titan/data/image_captions.h"
#include "titan/train/flux/flux_dataset.h"
#include "titan/train/flux/flux_encoders.h"

namespace titan::train::flux {

// Each image decoded, resized and centre-cropped to img_size and encoded by
// the autoencoder, each caption by T5 and CLIP, `batch` images per encoder
// call; `progress` hears the count done after each call.
FluxExamples encode_examples(const std::vector<data::CaptionedImage>& items, const FluxEncoders& encoders,
                             int64_t img_size, size_t batch = 16,
                             const std::function<void(size_t done)>& progress = {});

// The empty caption's encodings, caption dropout's stand-in: T5 [Lt, d], CLIP [d].
TextEncodings empty_prompt(const FluxEncoders& encoders);

// The split whose batches are `items` encoded when drawn (nothing is kept).
FluxSplit encoded_on_the_fly(std::vector<data::CaptionedImage> items, std::shared_ptr<const FluxEncoders> encoders,
                             int64_t img_size);

// A job's source when training.dataset_path is a captions.jsonl (images
// relative to its folder) and, for validation, validation.dataset_path
// another: both encoded on the fly by the job's [encoder] encoders.
FluxSource on_the_fly_source(const JobConfig& config);

}  // namespace titan::train::flux
