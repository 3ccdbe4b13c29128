// FLUX's frozen text encoders from their Hugging Face folders: T5EncoderModel
// (FLUX's text_encoder_2, google/t5-v1_1-xxl) and CLIPTextModel (its
// text_encoder, openai/clip-vit-large-patch14), each config.json
// (text_encoder_config_json.h) plus model.safetensors or its sharded index.
// Every parameter must be in the folder with its shape and a float dtype, and
// every tensor there must be a parameter (or one transformers keeps that the
// encoder does not use); errors name the file and the tensor. The tokenizers
// beside them (tokenizer.json) are the data layer's: load_hf_tokenizer_file.
#pragma once

#include <memory>
#include <string>

#include "titan/core/device.h"
#include "titan/core/dtype.h"
#include "titan/models/flux/clip_text_encoder.h"
#include "titan/models/flux/t5_encoder.h"

namespace titan::models::flux {

// The encoder with the folder's weights cast to `dtype`, on `device`.
std::shared_ptr<T5Encoder> load_t5_encoder(const std::string& folder, DType dtype = DType::f32,
                                           Device device = Device::cpu());
std::shared_ptr<ClipTextEncoder> load_clip_text_encoder(const std::string& folder, DType dtype = DType::f32,
                                                        Device device = Device::cpu());

}  // namespace titan::models::flux
