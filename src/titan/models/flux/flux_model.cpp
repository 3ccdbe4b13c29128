#include "titan/models/flux/flux_model.h"

#include <string>

#include "titan/core/error.h"
#include "titan/nn/functional.h"
#include "titan/nn/initialize.h"
#include "titan/nn/module_dict.h"

namespace titan::models::flux {

namespace {

constexpr int64_t kTimestepWidth = 256;  // the sinusoidal embedding MLPEmbedder reads

std::shared_ptr<nn::Linear> xavier_linear(int64_t in, int64_t out, Device device) {
  auto linear = nn::LinearConfig{in, out, true}.build(device);
  xavier_uniform(*linear);
  return linear;
}

void check_tokens(const Tensor& x, const char* name, int64_t batch, int64_t width) {
  TITAN_CHECK(x.defined() && x.dim() == 3 && x.size(0) == batch && x.size(2) == width,
              "flux: {} must be [B={}, L, {}] (got {})", name, batch, width,
              x.defined() ? shape_str(x.shape()) : std::string("nothing"));
}

void check_ids(const Tensor& ids, const char* name, const Tensor& tokens) {
  TITAN_CHECK(ids.defined() && ids.dim() == 3 && ids.size(0) == tokens.size(0) && ids.size(1) == tokens.size(1) &&
                  ids.size(2) == 3,
              "flux: {} must be [B, L, 3] for tokens {} (got {})", name, shape_str(tokens.shape()),
              ids.defined() ? shape_str(ids.shape()) : std::string("nothing"));
}

FluxConfig validated(const FluxConfig& config) {
  config.validate();
  return config;
}

void check_per_sample(const Tensor& x, const char* name, int64_t batch) {
  TITAN_CHECK(x.defined() && x.dim() == 1 && x.size(0) == batch, "flux: {} must be [B={}] (got {})", name, batch,
              x.defined() ? shape_str(x.shape()) : std::string("nothing"));
}

}  // namespace

FluxModel::FluxModel(const FluxConfig& config_in, Device device)
    : config(validated(config_in)),
      img_in(register_module("img_in", xavier_linear(config.in_channels, config.hidden_size, device))),
      time_in(register_module("time_in", std::make_shared<MLPEmbedder>(kTimestepWidth, config.hidden_size, device))),
      guidance_in(config.guidance_embed
                      ? register_module("guidance_in",
                                        std::make_shared<MLPEmbedder>(kTimestepWidth, config.hidden_size, device))
                      : nullptr),
      vector_in(
          register_module("vector_in", std::make_shared<MLPEmbedder>(config.vec_in_dim, config.hidden_size, device))),
      txt_in(register_module("txt_in", xavier_linear(config.context_in_dim, config.hidden_size, device))) {
  auto doubles = register_module("double_blocks", std::make_shared<nn::ModuleDict<DoubleStreamBlock>>());
  for (int64_t i = 0; i < config.depth; ++i) {
    double_blocks.push_back(std::make_shared<DoubleStreamBlock>(config, device));
    doubles->insert(std::to_string(i), double_blocks.back());
  }
  auto singles = register_module("single_blocks", std::make_shared<nn::ModuleDict<SingleStreamBlock>>());
  for (int64_t i = 0; i < config.depth_single_blocks; ++i) {
    single_blocks.push_back(std::make_shared<SingleStreamBlock>(config, device));
    singles->insert(std::to_string(i), single_blocks.back());
  }
  final_layer = register_module("final_layer", std::make_shared<LastLayer>(config, device));
  name_modules();
}

Tensor FluxModel::forward(const FluxInputs& inputs) const {
  const ForwardScope scope(*this);
  TITAN_CHECK(inputs.img.defined(), "flux: no image tokens");
  const int64_t batch = inputs.img.size(0);
  check_tokens(inputs.img, "img", batch, config.in_channels);
  check_tokens(inputs.txt, "txt", batch, config.context_in_dim);
  check_ids(inputs.img_ids, "img_ids", inputs.img);
  check_ids(inputs.txt_ids, "txt_ids", inputs.txt);
  check_per_sample(inputs.timesteps, "timesteps", batch);
  TITAN_CHECK(
      inputs.y.defined() && inputs.y.dim() == 2 && inputs.y.size(0) == batch && inputs.y.size(1) == config.vec_in_dim,
      "flux: y must be [B={}, {}] (got {})", batch, config.vec_in_dim,
      inputs.y.defined() ? shape_str(inputs.y.shape()) : std::string("nothing"));
  if (config.guidance_embed) {
    check_per_sample(inputs.guidance, "guidance (this flavor embeds the guidance scale)", batch);
  }

  const DType dtype = inputs.img.dtype();
  Tensor img = img_in->forward(inputs.img);
  Tensor vec = time_in->forward(timestep_embedding(inputs.timesteps, kTimestepWidth).to(dtype));
  if (guidance_in) {
    vec = F::add(vec, guidance_in->forward(timestep_embedding(inputs.guidance, kTimestepWidth).to(dtype)));
  }
  vec = F::add(vec, vector_in->forward(inputs.y));
  Tensor txt = txt_in->forward(inputs.txt);

  // Positions of the text tokens, then the image tokens: the joint sequence's order.
  const Tensor ids = F::concat(inputs.txt_ids.to(DType::i64), inputs.img_ids.to(DType::i64), 1);
  const AxesRope rope = axes_rope(ids, config.axes_dim, config.theta);

  const int64_t text_tokens = txt.size(1), image_tokens = img.size(1);
  Tensor stream = pack_stream(vec, F::concat(txt, img, 1));
  for (const auto& block : double_blocks) stream = block->forward(stream, text_tokens, rope);
  for (const auto& block : single_blocks) stream = block->forward(stream, rope);
  img = stream_tokens(stream, text_tokens, image_tokens);
  return final_layer->forward(img, vec);
}

void FluxModel::init_weights(Generator generator) { nn::initialize(*this, generator.seed()); }

void FluxModel::set_attention_core(const nn::AttentionCore& core) {
  attention_core_ = core;
  for (const auto& block : double_blocks) block->set_attention_core(core);
  for (const auto& block : single_blocks) block->set_attention_core(core);
}

}  // namespace titan::models::flux
