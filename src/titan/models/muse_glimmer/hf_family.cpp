#include "titan/models/muse_glimmer/hf_family.h"

namespace titan::models::muse_glimmer {

HfFamily hf_family() {
  HfFamily family;
  family.model = "muse_glimmer";
  family.architecture = "MuseGlimmerForConditionalGeneration";
  family.model_type = "muse_glimmer";
  family.text_model_type = "muse_glimmer_text";
  family.weights_prefix = "model.language_model.";
  family.skipped_tensor_prefixes = {"model.vision_tower.", "model.vision_adapter.", "model.vision_projection."};
  family.rope_style = ops::RopeStyle::interleaved;  // titan's flavors rotate neighbouring pairs, as TorchTitan's
  family.qk_norm = true;
  family.gated_attention = true;
  family.norms = HfNorms::pre_and_post;
  family.norm_weight_offset = 1.0;
  family.sliding = HfSlidingLayers::every_fourth_from_last;
  family.writes_layer_types = true;
  family.writes_rope_parameters = true;
  family.activation_key = "hidden_activation";
  family.disabled_features = {"attention_bias"};
  // MuseGlimmerTextConfig's fields: the only keys its text_config may hold (with PreTrainedConfig's own).
  family.known_keys = {"vocab_size",
                       "hidden_size",
                       "intermediate_size",
                       "num_hidden_layers",
                       "num_attention_heads",
                       "num_key_value_heads",
                       "head_dim",
                       "hidden_activation",
                       "hidden_act",
                       "max_position_embeddings",
                       "rms_norm_eps",
                       "rope_parameters",
                       "rope_theta",
                       "rope_scaling",
                       "attention_bias",
                       "attention_dropout",
                       "sliding_window",
                       "layer_types",
                       "final_logit_softcapping",
                       "qk_scale_factor",
                       "output_multiplier",
                       "post_norm_eps",
                       "layer_rope_theta"};
  // MuseGlimmerTextConfig's defaults (the 30B model), for keys a config.json leaves out.
  HfConfig& d = family.defaults;
  d.hidden_size = 6656;
  d.intermediate_size = 19968;
  d.num_hidden_layers = 52;
  d.num_attention_heads = 32;
  d.num_key_value_heads = 2;
  d.head_dim = 128;
  d.vocab_size = 202048;
  d.max_position_embeddings = 131072;
  d.rms_norm_eps = 1e-5;
  d.rope_theta = 10000.0;  // transformers' default when rope_parameters is absent; published files set 500000
  d.tie_word_embeddings = false;
  d.sliding_window = 2048;
  d.final_logit_softcapping = 20.0;
  d.qk_scale_factor = 3.87;
  d.output_multiplier = 0.19611613513818404;
  d.post_norm_eps = 1e-8;
  return family;
}

}  // namespace titan::models::muse_glimmer
