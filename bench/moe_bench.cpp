#include "bench/moe_bench.h"
#include "titan/nn/initialize.h"

#include <omp.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench/json_report.h"
#include "bench/peer_process.h"
#include "bench/scaling_bench.h"
#include "bench/timing.h"
#include "bench/train_bench.h"
#include "titan/autograd/engine.h"
#include "titan/models/model_spec.h"
#include "titan/ops/cpu/isa.h"
#include "titan/ops/random.h"

namespace titan::bench {
namespace {

struct LayerShape {
  std::string name;
  nn::MoEConfig moe;
  int64_t tokens;
};

// The first MoE layer's config of a qwen3_moe flavor.
nn::MoEConfig moe_layer_of(const std::string& flavor) {
  const models::DecoderConfig config = models::model_config("qwen3_moe", flavor, 0);
  for (const nn::TransformerBlockConfig& layer : config.layers) {
    if (layer.moe) return *layer.moe;
  }
  fail("qwen3_moe {} has no MoE layer", flavor);
}

// Forward + backward of one MoE layer on random tokens, with a random upstream gradient.
double titan_layer_seconds(const LayerShape& shape, nn::ExpertImpl impl, const MoeBenchOptions& o) {
  nn::MoEConfig config = shape.moe;
  config.expert_impl = impl;
  config.aux_loss_coef = 0.0;
  config.load_balance_coeff = 0.0;
  const std::shared_ptr<nn::MoE> moe = config.build();
  Generator generator(1);
  moe->set_init(0.02);
  nn::initialize(*moe, generator.seed());
  Tensor x = Tensor::zeros({shape.tokens, config.dim});
  const Tensor grad = Tensor::zeros({shape.tokens, config.dim});
  ops::normal_(x, 0.0, 1.0, generator);
  ops::normal_(grad, 0.0, 1.0, generator);
  x.set_requires_grad(true);
  return median_seconds(
      [&] {
        moe->zero_grad();
        autograd::backward({moe->forward(x, nullptr)}, {grad});
      },
      o.warmup, o.repeats);
}

double peer_seconds(const std::string& arguments, int steps, int warmup) {
  const std::string environment = peer_isa_environment();
  const std::string command =
      fmt::format("{}/usr/bin/python3 {} {} --steps {} --warmup {} --threads {}", environment,
                  shared_file("bench/moe_peer.py"), arguments, steps, warmup, omp_get_max_threads());
  const auto result = run_peer(command, "moe bench");
  return result && result->contains("median_seconds") ? (*result)["median_seconds"].get<double>() : -1.0;
}

double peer_layer_seconds(const LayerShape& shape, const MoeBenchOptions& o) {
  const nn::MoEConfig& m = shape.moe;
  return peer_seconds(fmt::format("layer --dim {} --hidden {} --experts {} --top-k {} --tokens {}", m.dim, m.hidden_dim,
                                  m.num_experts, m.top_k, shape.tokens),
                      o.repeats, o.warmup);
}

double peer_train_seconds(const TrainBenchOptions& t) {
  const models::DecoderConfig config = models::model_config("qwen3_moe", "debugmodel", t.vocab);
  const nn::AttentionConfig& attention = config.layers.front().attention;
  const nn::MoEConfig moe = moe_layer_of("debugmodel");
  std::string dense;
  for (size_t i = 0; i < config.layers.size(); ++i) {
    if (config.layers[i].moe) continue;
    if (!dense.empty()) dense += ',';
    dense += std::to_string(i);
  }
  return peer_seconds(
      fmt::format("train --dim {} --layers {} --heads {} --kv-heads {} --head-dim {} --hidden {} --moe-hidden {} "
                  "--experts {} --top-k {} --dense-layers {} --vocab {} --seq {} --batch {}",
                  config.dim(), config.n_layers(), attention.n_heads, attention.kv_heads(), attention.head_dim,
                  config.layers.front().feed_forward.hidden_dim, moe.hidden_dim, moe.num_experts, moe.top_k,
                  dense.empty() ? "''" : dense, t.vocab, t.seq_len, t.batch),
      t.steps, t.warmup);
}

}  // namespace

int run_moe_bench(const MoeBenchOptions& o) {
  std::printf("titan bench moe: %d threads, CPU kernels %s, f32, median of %d after %d warm-up\n\n",
              omp_get_max_threads(), ops::cpu::selected_isa(), o.repeats, o.warmup);
  nlohmann::json report;

  // 1. One MoE layer, forward + backward.
  const std::vector<LayerShape> shapes{{"qwen3_moe debugmodel", moe_layer_of("debugmodel"), 8 * 512},
                                       {"Qwen3-30B-A3B layer", moe_layer_of("30B-A3B"), o.large_tokens}};
  std::printf("MoE layer forward + backward (ms)\n%-22s %8s %8s %6s %10s %10s %10s %9s %9s\n", "shape", "tokens",
              "experts", "top-k", "grouped", "loop", "torch", "vs torch", "vs loop");
  for (const LayerShape& shape : shapes) {
    const double grouped = titan_layer_seconds(shape, nn::ExpertImpl::grouped, o);
    const double loop = titan_layer_seconds(shape, nn::ExpertImpl::loop, o);
    const double torch = o.peer ? peer_layer_seconds(shape, o) : -1.0;
    const std::string torch_ms = torch > 0 ? fmt::format("{:.1f}", 1e3 * torch) : "-";
    const std::string vs_torch = torch > 0 ? fmt::format("{:.2f}x", torch / grouped) : "-";
    std::printf("%-22s %8lld %8lld %6lld %10.1f %10.1f %10s %9s %8.2fx\n", shape.name.c_str(),
                static_cast<long long>(shape.tokens), static_cast<long long>(shape.moe.num_experts),
                static_cast<long long>(shape.moe.top_k), 1e3 * grouped, 1e3 * loop, torch_ms.c_str(), vs_torch.c_str(),
                loop / grouped);
    report["layer"].push_back({{"shape", shape.name},
                               {"tokens", shape.tokens},
                               {"titan_grouped_seconds", grouped},
                               {"titan_loop_seconds", loop},
                               {"torch_loop_seconds", torch},
                               {"speedup_vs_torch", torch > 0 ? torch / grouped : 0.0},
                               {"speedup_vs_titan_loop", loop / grouped}});
  }

  // 2. A training step of the debug model.
  TrainBenchOptions train;
  train.steps = o.train_steps;
  const double tokens = static_cast<double>(train.batch * train.seq_len);
  const double titan_step = titan_median_train_step("qwen3_moe", train, "f32");
  const double peer_step = o.peer ? peer_train_seconds(train) : -1.0;
  std::printf("\nqwen3_moe debugmodel training step, f32, seq %lld x batch %lld\n%14s %14s %8s\n%14.0f %14.0f %7.2fx\n",
              static_cast<long long>(train.seq_len), static_cast<long long>(train.batch), "titan tok/s", "torch tok/s",
              "ratio", tokens / titan_step, peer_step > 0 ? tokens / peer_step : 0.0,
              peer_step > 0 ? peer_step / titan_step : 0.0);
  report["train"] = {{"titan_tokens_per_second", tokens / titan_step},
                     {"torch_tokens_per_second", peer_step > 0 ? tokens / peer_step : 0.0}};

  // 3. Expert parallelism over 1, 2, 4 ranks (the same per-rank batch).
  if (o.scaling) {
    ScalingBenchOptions scaling;
    scaling.config = "configs/qwen3_moe_debug.toml";
    scaling.expert_parallel = true;
    scaling.steps = 6;
    std::printf(
        "\nqwen3_moe debugmodel, expert_parallel_degree = data_parallel_shard_degree = ranks, seq %lld x "
        "batch %lld per rank (comm: every collective, the all-to-alls and FSDP's)\n",
        static_cast<long long>(scaling.seq_len), static_cast<long long>(scaling.local_batch));
    report["expert_parallel"] = scaling_json(measure_scaling(scaling));
  }
  write_json_report(o.json_path, report);
  return 0;
}

}  // namespace titan::bench
