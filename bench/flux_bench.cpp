#include "bench/flux_bench.h"

#include <omp.h>

#include <fmt/format.h>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench/json_report.h"
#include "bench/peer_process.h"
#include "bench/timing.h"
#include "bench/train_bench.h"
#include "titan/autograd/engine.h"
#include "titan/models/flux/flux_model.h"
#include "titan/ops/cpu/isa.h"
#include "titan/ops/random.h"
#include "titan/optim/adamw.h"
#include "titan/train/flux/flux_batch.h"
#include "titan/train/flux/flux_sampler.h"

namespace titan::bench {
namespace {

using models::flux::FluxConfig;

struct FluxShape {
  std::string name;
  int64_t image_tokens, text_tokens, batch;
};

Tensor normal(const titan::Shape& shape, Generator& generator) {
  const Tensor t = Tensor::empty(shape);
  ops::normal_(t, 0.0, 1.0, generator);
  return t;
}

// Random latents of the shape's size and text states.
train::flux::FluxBatch random_batch(const FluxConfig& config, const FluxShape& s, Generator& generator) {
  const int64_t side = 2 * static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(s.image_tokens))));
  return {normal({s.batch, config.in_channels / 4, side, side}, generator),
          normal({s.batch, s.text_tokens, config.context_in_dim}, generator),
          normal({s.batch, config.vec_in_dim}, generator), 0};
}

double titan_train_seconds(const FluxConfig& config, const FluxShape& s, const FluxBenchOptions& o,
                           int64_t* parameters) {
  models::flux::FluxModel model(config);
  model.init_weights(Generator(0));
  std::vector<std::pair<std::string, Tensor>> named;
  for (auto& [name, parameter] : model.named_parameters()) named.emplace_back(name, parameter->data);
  *parameters = 0;
  for (const auto& [name, tensor] : named) *parameters += tensor.numel();
  optim::AdamW optimizer(named, optim::AdamWOptions{});
  Generator generator(1);
  const train::flux::FluxBatch batch = random_batch(config, s, generator);
  const Tensor noise = normal(batch.latents.shape(), generator);
  return median_seconds(
      [&] {
        const Tensor t = Tensor::empty({s.batch});
        ops::uniform_(t, 0.0, 1.0, generator);
        model.zero_grad();
        autograd::backward({train::flux::flow_matching_loss(model, batch, noise, t, DType::f32)});
        optimizer.step(1e-4);
      },
      o.warmup, o.steps);
}

double peer_train_seconds(const FluxConfig& c, const FluxShape& s, const FluxBenchOptions& o, int64_t* parameters) {
  const std::string command = fmt::format(
      "{}/usr/bin/python3 {} --hidden {} --heads {} --depth {} --single-depth {} --axes {},{},{} --in-channels {} "
      "--context-dim {} --vec-dim {} --image-tokens {} --text-tokens {} --batch {} --steps {} --warmup {} "
      "--threads {}",
      peer_isa_environment(), shared_file("bench/flux_peer.py"), c.hidden_size, c.num_heads, c.depth,
      c.depth_single_blocks, c.axes_dim[0], c.axes_dim[1], c.axes_dim[2], c.in_channels, c.context_in_dim, c.vec_in_dim,
      s.image_tokens, s.text_tokens, s.batch, o.steps, o.warmup, omp_get_max_threads());
  const auto result = run_peer(command, "flux bench");
  if (!result || !result->contains("median_seconds")) return -1.0;
  *parameters = result->value("parameters", int64_t{0});
  return (*result)["median_seconds"].get<double>();
}

}  // namespace

int run_flux_bench(const FluxBenchOptions& o) {
  FluxConfig config = models::flux::flux_flavor("flux-debug");
  if (o.quick) {
    config.hidden_size = 256;
    config.num_heads = 2;
  }
  std::printf("titan bench flux: %s (width %lld, %lld + %lld blocks), f32, CPU kernels %s, %d threads\n",
              o.quick ? "a narrow flux-debug" : "flux-debug", static_cast<long long>(config.hidden_size),
              static_cast<long long>(config.depth), static_cast<long long>(config.depth_single_blocks),
              ops::cpu::selected_isa(), omp_get_max_threads());
  std::printf("  %-22s %14s %14s %10s\n", "training step", "titan s", "PyTorch s", "speed-up");
  nlohmann::json results = nlohmann::json::array();
  for (const FluxShape& s :
       {FluxShape{"256 px (256 + 256)", 256, 256, 1}, FluxShape{"512 px (1024 + 256)", 1024, 256, 1}}) {
    int64_t titan_parameters = 0, peer_parameters = 0;
    const double titan = titan_train_seconds(config, s, o, &titan_parameters);
    const double peer = o.peer ? peer_train_seconds(config, s, o, &peer_parameters) : -1.0;
    if (peer > 0 && peer_parameters != titan_parameters) {
      std::printf("  (the peer's model has %lld parameters, titan's %lld: not the same model)\n",
                  static_cast<long long>(peer_parameters), static_cast<long long>(titan_parameters));
    }
    std::printf("  %-22s %14.3f %14s %10s\n", s.name.c_str(), titan,
                peer > 0 ? fmt::format("{:.3f}", peer).c_str() : "-",
                peer > 0 ? fmt::format("{:.2f}x", peer / titan).c_str() : "-");
    results.push_back(
        {{"case", s.name}, {"titan_seconds", titan}, {"peer_seconds", peer}, {"parameters", titan_parameters}});
  }
  // Sampling: one 256-pixel image, guidance on (two forwards per step).
  models::flux::FluxModel model(config);
  model.init_weights(Generator(0));
  Generator generator(2);
  const FluxShape s{"sample", 256, 256, 1};
  const train::flux::FluxBatch prompt = random_batch(config, s, generator);
  train::flux::SamplingOptions sampling;
  sampling.steps = o.sampling_steps;
  sampling.guidance = true;
  const double sample = median_seconds(
      [&] {
        train::flux::sample_latents(model, prompt.t5, prompt.clip, Tensor::zeros({256, config.context_in_dim}),
                                    Tensor::zeros({config.vec_in_dim}), 16, 16, sampling);
      },
      0, 1);
  std::printf("  sampling one 256 px image: %d Euler steps with guidance in %.3f s (%.3f s per step)\n",
              o.sampling_steps, sample, sample / o.sampling_steps);
  results.push_back({{"case", "sampling"}, {"titan_seconds", sample}, {"steps", o.sampling_steps}});
  write_json_report(o.json_path, {{"suite", "flux"}, {"results", results}});
  return 0;
}

}  // namespace titan::bench
