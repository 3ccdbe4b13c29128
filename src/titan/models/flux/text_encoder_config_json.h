// config.json of FLUX's two frozen text encoders as Hugging Face saves them:
// T5EncoderModel's T5Config (google/t5-v1_1-xxl, FLUX's text_encoder_2) and
// CLIPTextModel's CLIPTextConfig (openai/clip-vit-large-patch14, FLUX's
// text_encoder). Only the keys that shape titan's encoders are read; a value
// titan's encoder would compute differently (another activation, another
// pooling rule) is refused naming the key. Parsed apart from any file I/O so
// it can be fuzzed.
#pragma once

#include <string>
#include <string_view>

#include "titan/models/flux/clip_text_config.h"
#include "titan/models/flux/t5_encoder_config.h"

namespace titan::models::flux {

// Errors name `source` (the file) and the key.
T5EncoderConfig parse_t5_encoder_config(std::string_view json_text, const std::string& source);
ClipTextConfig parse_clip_text_config(std::string_view json_text, const std::string& source);

}  // namespace titan::models::flux
