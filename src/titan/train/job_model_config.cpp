#include "titan/train/job_model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "titan/models/decoder_config_diff.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/model_spec.h"

namespace titan::train {

models::DecoderConfig resolve_model_config(JobConfig& config, int64_t vocab_size, const std::string& base_folder) {
  ModelSection& model = config.model;
  models::DecoderConfig decoder;
  if (!model.hf_config.empty()) {
    std::filesystem::path path(model.hf_config);
    if (path.is_relative() && !base_folder.empty()) path = std::filesystem::path(base_folder) / path;
    const models::HfConfig hf = models::read_hf_config_file(path.string());
    decoder = models::decoder_config_from_hf(hf);
    TITAN_CHECK(vocab_size <= 0 || vocab_size == decoder.vocab_size,
                "model.vocab_size {} differs from vocab_size {} in model.hf_config {}", vocab_size, decoder.vocab_size,
                path.string());
    model.name = models::hf_family(hf).model;
    model.flavor = models::matching_flavor(model.name, decoder);
  } else {
    decoder = models::model_config(model.name, model.flavor, vocab_size);
  }
  const nn::ExpertImpl expert_impl = nn::parse_expert_impl(model.moe_expert_impl);
  decoder.edit_layers([&](nn::TransformerBlockConfig& block) {
    block.attention.attention_impl = model.attention;
    if (!block.moe) return;
    block.moe->expert_impl = expert_impl;
    if (model.moe_aux_loss_coef >= 0) block.moe->aux_loss_coef = model.moe_aux_loss_coef;
    if (model.moe_load_balance_coeff >= 0) block.moe->load_balance_coeff = model.moe_load_balance_coeff;
  });
  if (model.num_mtp_layers >= 0) {
    TITAN_CHECK(model.num_mtp_layers == 0 || model.name == "deepseek_v3",
                "model.num_mtp_layers = {}: multi-token prediction is built for deepseek_v3 only (model.name = {})",
                model.num_mtp_layers, model.name);
    decoder.mtp_layers.assign(static_cast<size_t>(model.num_mtp_layers), decoder.layers.back());
  }
  TITAN_CHECK(std::isfinite(model.mtp_scale) && model.mtp_scale >= 0, "model.mtp_scale = {} must be >= 0",
              model.mtp_scale);
  TITAN_CHECK(decoder.mtp_layers.empty() || !model.document_masking,
              "model.num_mtp_layers = {} (multi-token prediction) with model.document_masking = true is not built: "
              "the shifted tokens would cross document boundaries; set one of them off",
              decoder.mtp_layers.size());
  decoder.loss.mtp_scale = model.mtp_scale;
  decoder.loss.fused = model.fused_loss;
  decoder.loss.vocab_chunk = model.loss_vocab_chunk;
  decoder.max_seq_len = std::max(decoder.max_seq_len, config.training.seq_len);
  return decoder;
}

}  // namespace titan::train
