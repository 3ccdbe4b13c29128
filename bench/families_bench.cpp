#include "bench/families_bench.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/json_report.h"
#include "bench/peer_process.h"
#include "bench/train_bench.h"
#include "titan/core/error.h"
#include "titan/models/model_spec.h"
#include "titan/ops/cpu/isa.h"

namespace titan::bench {
namespace {

const char* qk_norm_kind(const nn::AttentionConfig& a) {
  if (!a.qk_norm) return "none";
  if (!a.qk_norm_learnable) return "scaleless";
  return a.qk_norm_whole_projection ? "whole" : "head";
}

// The peer's architecture switches, read from titan's config of the flavor, so
// both sides train what the family's config.json defines. What may differ per
// layer (the window, the local RoPE table) goes per layer; the rest is the
// first layer's, and the layers are checked to agree on it.
std::string peer_architecture(const std::string& model, const models::DecoderConfig& c) {
  const nn::TransformerBlockConfig& b = c.layers.front();
  const nn::AttentionConfig& a = b.attention;
  TITAN_CHECK(c.rope_scaling.factor == 0.0, "families bench: {} has RoPE scaling, which the peer lacks", model);
  std::string windows, local_rope, rope_layers;
  for (const nn::TransformerBlockConfig& layer : c.layers) {
    const nn::AttentionConfig& l = layer.attention;
    TITAN_CHECK(!layer.moe && l.qk_norm == a.qk_norm && l.query_scale == a.query_scale &&
                    l.output_gate == a.output_gate && l.qk_norm_learnable == a.qk_norm_learnable &&
                    l.qkv_bias == a.qkv_bias && l.logit_softcap == a.logit_softcap && l.scale_dim == a.scale_dim &&
                    l.n_heads == a.n_heads && l.kv_heads() == a.kv_heads() && layer.pre_norms == b.pre_norms &&
                    layer.post_norms == b.post_norms && layer.feed_forward.hidden_dim == b.feed_forward.hidden_dim,
                "families bench: {}'s layers differ in more than window, RoPE table and NoPE (the peer's model)",
                model);
    windows += fmt::format("{}{}", windows.empty() ? "" : ",", l.sliding_window);
    local_rope += fmt::format("{}{}", local_rope.empty() ? "" : ",", l.local_rope ? 1 : 0);
    rope_layers += fmt::format("{}{}", rope_layers.empty() ? "" : ",", l.rope ? 1 : 0);
  }
  // Muse Glimmer's final norm (its own offset), post-norm eps, embedding norm and logit multiplier.
  const double final_norm_offset = c.final_norm ? c.final_norm->weight_offset : b.norm_weight_offset;
  return fmt::format(
      "--dim {} --layers {} --heads {} --kv-heads {} --head-dim {} --hidden {} --vocab {} --eps {} --norm-offset {} "
      "--pre-norms {:d} --post-norms {:d} --qk-norm {} --qk-norm-eps {} --qk-norm-offset {} --qkv-bias {:d} "
      "--fused-projections {:d} --activation {} --scale-dim {} --attn-softcap {} --final-softcap {} "
      "--embedding-scale {} --rope-style {} --rope-theta {} --local-rope-theta {} --windows {} --local-rope {} "
      "--tie {:d} --rope-layers {} --query-scale {} --output-gate {:d} --embedding-norm-eps {} --post-norm-eps {} "
      "--final-norm-offset {} --output-multiplier {}",
      a.dim, c.n_layers(), a.n_heads, a.kv_heads(), a.head_size(), b.feed_forward.hidden_dim, c.vocab_size, b.norm_eps,
      b.norm_weight_offset, b.pre_norms, b.post_norms, qk_norm_kind(a), a.norm_eps, a.qk_norm_weight_offset, a.qkv_bias,
      // Hugging Face's Phi-3 stores q/k/v and gate/up fused, and its PyTorch model runs them as one Linear each.
      model == "phi3", b.feed_forward.activation == nn::FeedForwardActivation::gelu_tanh ? "gelu_tanh" : "silu",
      a.scale_dim > 0 ? a.scale_dim : static_cast<double>(a.head_size()), a.logit_softcap, c.loss.softcap,
      c.embedding_scale, a.rope_style == ops::RopeStyle::half ? "half" : "interleaved", c.rope_theta,
      c.local_rope_theta, windows, local_rope, c.tie_embeddings, rope_layers, a.query_scale, a.output_gate,
      c.embedding_norm_eps, b.post_norm_eps, final_norm_offset, c.output_multiplier);
}

// The families whose layers the peer's one decoder cannot express (latent
// attention, experts in every layer, Gated DeltaNet): for these the peer trains
// tests/reference's plain-PyTorch model of the family (the float64 reference of
// the parity tests, shipped as share/titan/bench/reference/, run in f32),
// configured by this JSON of titan's config.
bool peer_uses_reference_model(const std::string& model) {
  return model == "deepseek_v3" || model == "gpt_oss" || model == "qwen3_5";
}

nlohmann::json reference_architecture(const std::string& model, const models::DecoderConfig& c) {
  const nn::TransformerBlockConfig& first = c.layers.front();
  const nn::AttentionConfig& a = first.attention;
  nlohmann::json j{{"dim", a.dim}, {"n_layers", c.n_layers()}, {"n_heads", a.n_heads}, {"vocab_size", c.vocab_size}};
  if (model == "deepseek_v3") {
    int64_t dense = 0;
    while (dense < c.n_layers() && !c.layers[static_cast<size_t>(dense)].moe) ++dense;
    TITAN_CHECK(dense < c.n_layers() && first.mla, "families bench: deepseek_v3 needs latent attention and experts");
    for (int64_t i = dense; i < c.n_layers(); ++i) {
      TITAN_CHECK(c.layers[static_cast<size_t>(i)].moe,
                  "families bench: deepseek_v3 layer {} is dense after an MoE layer (the reference's dense "
                  "layers come first)",
                  i);
    }
    const nn::MlaConfig& mla = *first.mla;
    const nn::MoEConfig& moe = *c.layers[static_cast<size_t>(dense)].moe;
    j.update({{"n_dense_layers", dense},
              {"q_lora_rank", mla.q_lora_rank},
              {"kv_lora_rank", mla.kv_lora_rank},
              {"qk_nope_head_dim", mla.qk_nope_head_dim},
              {"qk_rope_head_dim", mla.qk_rope_head_dim},
              {"v_head_dim", mla.v_head_dim},
              {"dense_hidden_dim", dense > 0 ? first.feed_forward.hidden_dim : moe.hidden_dim},
              {"moe_hidden_dim", moe.hidden_dim},
              {"num_experts", moe.num_experts},
              {"num_shared_experts", moe.num_shared_experts},
              {"top_k", moe.top_k},
              {"score", moe.score == nn::RouterScore::sigmoid ? "sigmoid" : "softmax"},
              {"num_expert_groups", moe.num_expert_groups},
              {"num_limited_groups", moe.num_limited_groups},
              {"route_scale", moe.route_scale},
              {"route_norm", moe.normalize_top_k},
              {"norm_eps", first.norm_eps},
              {"rope_theta", c.rope_theta},
              {"max_seq_len", c.max_seq_len}});
    const ops::RopeScaling& r = c.rope_scaling;
    if (r.factor > 1.0) {
      j["yarn"] = {{"type", "yarn"},
                   {"factor", r.factor},
                   {"original", r.original_max_position},
                   {"beta_fast", r.beta_fast},
                   {"beta_slow", r.beta_slow},
                   {"mscale", r.mscale},
                   {"mscale_all_dim", r.mscale_all_dim}};
    }
  } else if (model == "gpt_oss") {
    TITAN_CHECK(first.moe, "families bench: gpt_oss needs experts");
    const nn::MoEConfig& moe = *first.moe;
    const ops::RopeScaling& r = c.rope_scaling;
    int64_t window = 0;
    for (const nn::TransformerBlockConfig& layer : c.layers) window = std::max(window, layer.attention.sliding_window);
    // The reference's layout: every layer with experts, sinks and biases, the even ones sliding.
    for (int64_t i = 0; i < c.n_layers(); ++i) {
      const nn::TransformerBlockConfig& layer = c.layers[static_cast<size_t>(i)];
      TITAN_CHECK(layer.moe && layer.attention.sinks && layer.attention.qkv_bias && layer.attention.output_bias &&
                      layer.moe->router_bias && layer.moe->expert_biases &&
                      layer.attention.sliding_window == (i % 2 == 0 ? window : 0),
                  "families bench: gpt_oss layer {} differs from the reference model's layout", i);
    }
    j.update({{"n_kv_heads", a.kv_heads()},
              {"head_dim", a.head_size()},
              {"hidden_dim", moe.hidden_dim},
              {"num_experts", moe.num_experts},
              {"top_k", moe.top_k},
              {"sliding_window", window},
              {"norm_eps", first.norm_eps},
              {"rope_theta", c.rope_theta},
              {"rope_factor", r.factor},
              {"beta_fast", r.beta_fast},
              {"beta_slow", r.beta_slow},
              {"original_max_seq_len", r.original_max_position},
              {"max_seq_len", c.max_seq_len},
              {"swiglu_alpha", moe.swiglu_alpha},
              {"swiglu_limit", moe.swiglu_limit}});
  } else {
    // qwen3_5: the reference's Gated DeltaNet layers are the three of every four before a full one.
    const nn::TransformerBlockConfig* full = nullptr;
    const nn::TransformerBlockConfig* linear = nullptr;
    for (const nn::TransformerBlockConfig& layer : c.layers) (layer.delta_net ? linear : full) = &layer;
    TITAN_CHECK(full && linear && !first.moe, "families bench: qwen3_5's peer model is the dense hybrid");
    // The reference fixes the layout (full attention at every 4th layer), RoPE base 1e7 and norm eps 1e-6.
    for (int64_t i = 0; i < c.n_layers(); ++i) {
      TITAN_CHECK(!c.layers[static_cast<size_t>(i)].delta_net == ((i + 1) % 4 == 0),
                  "families bench: qwen3_5 layer {} differs from the reference model's 3 : 1 layout", i);
    }
    TITAN_CHECK(c.rope_theta == 1e7 && first.norm_eps == 1e-6,
                "families bench: qwen3_5's reference model has RoPE base 1e7 and norm eps 1e-6, not {} and {}",
                c.rope_theta, first.norm_eps);
    const nn::GatedDeltaNetConfig& d = *linear->delta_net;
    j.update({{"n_kv_heads", full->attention.kv_heads()},
              {"head_dim", full->attention.head_size()},
              {"rotary_dim", full->attention.rotary_size()},
              {"hidden_dim", first.feed_forward.hidden_dim},
              {"n_key_heads", d.n_key_heads},
              {"n_value_heads", d.n_value_heads},
              {"key_head_dim", d.key_head_dim},
              {"value_head_dim", d.value_head_dim},
              {"moe", nullptr}});
    j["n_heads"] = full->attention.n_heads;
  }
  return j;
}

// Runs the PyTorch peer; its report (median_step_seconds, parameters), or nullopt if it could not run.
std::optional<nlohmann::json> run_families_peer(const std::string& model, const models::DecoderConfig& config,
                                                const FamiliesBenchOptions& o, const std::string& dtype) {
  const std::string environment = peer_isa_environment();
  // The JSON holds no single quotes, so it passes through the shell quoted.
  const std::string architecture = peer_uses_reference_model(model)
                                       ? fmt::format("--reference-family {} --reference-config '{}'", model,
                                                     reference_architecture(model, config).dump())
                                       : peer_architecture(model, config);
  const std::string command =
      fmt::format("{}/usr/bin/python3 {}{} {} --seq {} --batch {} --steps {} --warmup {} --dtype {} --threads {}",
                  environment, shared_file("bench/families_peer.py"), environment.empty() ? "" : " --no-mkldnn",
                  architecture, o.seq_len, o.batch, o.steps, o.warmup, dtype, omp_get_max_threads());
  std::optional<nlohmann::json> result = run_peer(command, "families bench");
  if (result && !result->contains("median_step_seconds")) return std::nullopt;
  return result;
}

}  // namespace

std::vector<std::string> default_family_bench_models() {
  std::vector<std::string> models{"llama3"};
  for (const std::string& name : models::model_names()) {
    if (models::model_spec(name).from_hf_config) models.push_back(name);
  }
  // The peer has Muse Glimmer's switches too, and trains Qwen3.5 as its reference model.
  for (const char* extra : {"muse_glimmer", "qwen3_5"}) {
    if (std::find(models.begin(), models.end(), extra) == models.end()) models.push_back(extra);
  }
  return models;
}

int run_families_bench(const FamiliesBenchOptions& o) {
  const double tokens = static_cast<double>(o.batch * o.seq_len);
  std::printf(
      "titan bench families: debugmodel of each family, seq %lld x batch %lld, %d threads, CPU kernels %s, median "
      "of %d steps after %d warm-up\n",
      static_cast<long long>(o.seq_len), static_cast<long long>(o.batch), omp_get_max_threads(),
      ops::cpu::selected_isa(), o.steps, o.warmup);
  const std::string environment = peer_isa_environment();
  if (!environment.empty())
    std::printf("the PyTorch peer is held to the same ISA: %s--no-mkldnn\n", environment.c_str());
  std::printf("\n%-12s %-6s %10s %14s %14s %8s %12s\n", "model", "dtype", "params", "titan tok/s", "torch tok/s",
              "ratio", "titan TF/s");
  std::fflush(stdout);
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& model : o.models) {
    const models::DecoderConfig config = models::model_config(model, "debugmodel");
    const models::ModelSpec& spec = models::model_spec(model);
    TrainBenchOptions train;
    train.steps = o.steps;
    train.warmup = o.warmup;
    train.seq_len = o.seq_len;
    train.batch = o.batch;
    train.vocab = config.vocab_size;
    const double flops = spec.flops_per_token(config, o.seq_len) * tokens;
    const int64_t parameters = models::parameter_count(config);
    for (const std::string& dtype : o.dtypes) {
      const double titan_step = titan_median_train_step(model, train, dtype);
      const std::optional<nlohmann::json> peer =
          o.peer ? run_families_peer(model, config, o, dtype) : std::optional<nlohmann::json>();
      const double peer_step = peer ? (*peer)["median_step_seconds"].get<double>() : -1.0;
      // The same parameter count on both sides is a cheap check that the peer built the same architecture.
      const int64_t peer_parameters = peer ? peer->value("parameters", int64_t{0}) : 0;
      if (peer && peer_parameters != parameters)
        std::fprintf(stderr, "families bench: %s: the peer has %lld parameters, titan %lld\n", model.c_str(),
                     static_cast<long long>(peer_parameters), static_cast<long long>(parameters));
      const double titan_tps = tokens / titan_step, peer_tps = peer_step > 0 ? tokens / peer_step : 0.0;
      const double ratio = peer_tps > 0 ? titan_tps / peer_tps : 0.0;
      std::printf("%-12s %-6s %9.2fM %14.0f %14.0f %7.2fx %12.3f\n", model.c_str(), dtype.c_str(),
                  static_cast<double>(parameters) / 1e6, titan_tps, peer_tps, ratio, flops / titan_step / 1e12);
      std::fflush(stdout);
      results.push_back({{"model", model},
                         {"flavor", "debugmodel"},
                         {"dtype", dtype},
                         {"seq_len", o.seq_len},
                         {"batch", o.batch},
                         {"parameters", parameters},
                         {"torch_parameters", peer_parameters},
                         {"titan_tokens_per_second", titan_tps},
                         {"torch_tokens_per_second", peer_tps},
                         {"ratio", ratio},
                         {"titan_tflops", flops / titan_step / 1e12}});
    }
  }
  write_json_report(o.json_path, results);
  return 0;
}

}  // namespace titan::bench
