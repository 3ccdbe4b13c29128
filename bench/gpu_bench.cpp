#include "bench/gpu_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "bench/json_report.h"
#include "bench/peer_process.h"
#include "bench/timing.h"
#include "titan/core/copy.h"
#include "titan/models/model_spec.h"
#include "titan/ops/attention.h"
#include "titan/ops/gemm.h"
#include "titan/ops/random.h"
#include "titan/train/device_peak.h"
#include "titan/train/random_batches.h"
#include "titan/train/trainer.h"

namespace titan::bench {
namespace {

const Device kCuda = Device::cuda();

Tensor random_on_gpu(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::f32, kCuda);
  Generator generator(3);
  ops::uniform_(t, -1.0, 1.0, generator);
  return titan::cast(t, dtype);
}

// Median seconds of one call, timed over `calls` back-to-back launches so
// launch overhead is amortised as it is in training.
double gpu_seconds(const std::function<void()>& call, int repeats, int calls = 5) {
  const double batch = median_seconds(
      [&] {
        for (int i = 0; i < calls; ++i) call();
        titan::synchronize(kCuda);
      },
      /*warmup=*/2, repeats);
  return batch / calls;
}

double gemm_tflops(int64_t m, int64_t n, int64_t k, int repeats) {
  // Activations [M, K] times a weight stored [N, K] (a transposed view), as nn::Linear does.
  const Tensor a = random_on_gpu({m, k}, DType::bf16), w = random_on_gpu({n, k}, DType::bf16);
  const Tensor c = Tensor::empty({m, n}, DType::bf16, kCuda);
  const double seconds = gpu_seconds([&] { ops::gemm(a, w.transpose(0, 1), c); }, repeats);
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / seconds / 1e12;
}

nlohmann::json gemm_section(const models::DecoderConfig& config, int64_t tokens, int repeats) {
  const double peak = gemm_tflops(8192, 8192, 8192, repeats);
  std::printf("GEMM (bf16, f32 accumulate): cuBLASLt 8192^3 peak %.1f TFLOP/s\n", peak);
  std::printf("  %-28s %8s %8s %8s %10s %8s\n", "shape", "M", "N", "K", "TFLOP/s", "of peak");
  const int64_t dim = config.dim(), head = config.layers.front().attention.head_size();
  const int64_t kv = config.layers.front().attention.kv_heads() * head,
                hidden = config.layers.front().feed_forward.hidden_dim;
  const struct {
    const char* name;
    int64_t n, k;
  } shapes[] = {{"wq / wo", dim, dim},
                {"wk / wv", kv, dim},
                {"w1 / w3", hidden, dim},
                {"w2", dim, hidden},
                {"output (1 loss tile)", std::min<int64_t>(config.vocab_size, 32768), dim}};
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& s : shapes) {
    const double tflops = gemm_tflops(tokens, s.n, s.k, repeats);
    std::printf("  %-28s %8lld %8lld %8lld %10.1f %7.1f%%\n", s.name, static_cast<long long>(tokens),
                static_cast<long long>(s.n), static_cast<long long>(s.k), tflops, 100.0 * tflops / peak);
    rows.push_back({{"shape", s.name}, {"m", tokens}, {"n", s.n}, {"k", s.k}, {"tflops", tflops}});
  }
  return {{"square_peak_tflops", peak}, {"shapes", rows}};
}

nlohmann::json attention_section(const models::DecoderConfig& config, const GpuBenchOptions& o) {
  const int64_t hq = config.layers.front().attention.n_heads, hkv = config.layers.front().attention.kv_heads();
  const int64_t d = config.layers.front().attention.head_size(), b = o.batch, s = o.seq_len;
  const Tensor q = random_on_gpu({b, s, hq, d}, DType::bf16), k = random_on_gpu({b, s, hkv, d}, DType::bf16),
               v = random_on_gpu({b, s, hkv, d}, DType::bf16), grad_out = random_on_gpu({b, s, hq, d}, DType::bf16);
  const ops::AttentionMask mask;  // causal
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  ops::AttentionOutput out = ops::flash_attention(q, k, v, mask, scale);
  const double forward = gpu_seconds([&] { out = ops::flash_attention(q, k, v, mask, scale); }, o.repeats, 2);
  const double backward = gpu_seconds(
      [&] { ops::flash_attention_backward(grad_out, q, k, v, out.out, out.lse, mask, scale); }, o.repeats, 2);
  // Causal: half of the S x S scores. Forward = 2 matmuls, backward = 5.
  const double forward_flops = 2.0 * 2.0 * static_cast<double>(b * hq * d) * static_cast<double>(s * s) / 2.0;
  const double fwd_tflops = forward_flops / forward / 1e12;
  const double fwd_bwd_tflops = 3.5 * forward_flops / (forward + backward) / 1e12;
  std::printf(
      "\nattention (bf16, causal, B %lld, S %lld, Hq %lld, Hkv %lld, D %lld): forward %.1f TFLOP/s, "
      "forward+backward %.1f TFLOP/s\n",
      static_cast<long long>(b), static_cast<long long>(s), static_cast<long long>(hq), static_cast<long long>(hkv),
      static_cast<long long>(d), fwd_tflops, fwd_bwd_tflops);
  return {{"forward_tflops", fwd_tflops}, {"forward_backward_tflops", fwd_bwd_tflops}};
}

struct TrainResult {
  double tokens_per_second = 0, tflops = 0, mfu = 0, step_seconds = 0, host_seconds = 0;
};

TrainResult titan_train(const models::DecoderConfig& model, const GpuBenchOptions& o, bool graph_capture) {
  train::JobConfig config;
  config.model.flavor = o.flavor;
  config.model.vocab_size = model.vocab_size;
  config.training.device = "cuda";
  config.training.seq_len = o.seq_len;
  config.training.local_batch_size = o.batch;
  config.training.steps = o.warmup + o.steps;
  config.training.mixed_precision_param = "bf16";
  config.metrics.log_freq = 1000000;
  config.training.graph_capture = graph_capture;
  config.job.dump_folder = graph_capture ? "/tmp/titan_bench_gpu_graph" : "/tmp/titan_bench_gpu";
  train::Trainer trainer(config, train::random_token_batches(o.batch, o.seq_len, model.vocab_size, 1));
  std::vector<train::StepMetrics> timed;
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    train::StepMetrics m = trainer.train_step();
    if (step >= o.warmup) timed.push_back(m);
  }
  std::vector<double> host;
  for (const train::StepMetrics& m : timed) host.push_back(m.host_seconds);
  std::sort(host.begin(), host.end());
  std::sort(timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.step_seconds < b.step_seconds; });
  const train::StepMetrics& median = timed[timed.size() / 2];
  return {median.tokens_per_second, median.tflops, median.mfu_percent, median.step_seconds, host[host.size() / 2]};
}

}  // namespace

int run_gpu_bench(const GpuBenchOptions& o) {
  TITAN_CHECK(titan::copy_kernels.has_kernel(DeviceType::cuda),
              "bench gpu: no CUDA device is visible (or titan was built without the CUDA toolkit)");
  const models::DecoderConfig model = models::model_config("llama3", o.flavor, 0);
  const double peak = train::default_peak_tflops(kCuda, DType::bf16);
  std::printf("titan bench gpu: llama3 %s, seq %lld x batch %lld, bf16; MFU against %.1f TFLOP/s dense bf16\n\n",
              o.flavor.c_str(), static_cast<long long>(o.seq_len), static_cast<long long>(o.batch), peak);
  nlohmann::json results;
  results["gemm"] = gemm_section(model, o.batch * o.seq_len, o.repeats);
  results["attention"] = attention_section(model, o);

  const TrainResult eager = titan_train(model, o, /*graph_capture=*/false);
  const TrainResult titan = titan_train(model, o, /*graph_capture=*/true);
  double peer_tps = 0.0;
  if (o.peer) {
    const auto& a = model.layers.front().attention;
    const std::string command = fmt::format(
        "{} {} --dim {} --layers {} --heads {} --kv-heads {} --hidden {} --vocab {} --seq {} "
        "--batch {} --steps {} --warmup {} --rope-theta {} --tie {}",
        o.python, shared_file("bench/gpu_train_peer.py"), model.dim(), model.n_layers(), a.n_heads, a.kv_heads(),
        model.layers.front().feed_forward.hidden_dim, model.vocab_size, o.seq_len, o.batch, o.steps, o.warmup,
        model.rope_theta, model.tie_embeddings ? 1 : 0);
    if (auto peer = run_peer(command, "bench gpu")) peer_tps = (*peer)["tokens_per_second"].get<double>();
  }
  std::printf("\ntraining (median of %d steps after %d warm-up):\n", o.steps, o.warmup);
  // Host time: from the step's start until its device work is all queued. A
  // replayed graph is the device's work with no host gaps, so the eager step's
  // extra time over it is what the host cost the GPU.
  std::printf("  titan eager  %10.0f tok/s  %7.1f TFLOP/s  MFU %5.1f%%  step %.4fs  host %.4fs\n",
              eager.tokens_per_second, eager.tflops, eager.mfu, eager.step_seconds, eager.host_seconds);
  std::printf("  titan graph  %10.0f tok/s  %7.1f TFLOP/s  MFU %5.1f%%  step %.4fs  host %.4fs\n",
              titan.tokens_per_second, titan.tflops, titan.mfu, titan.step_seconds, titan.host_seconds);
  if (peer_tps > 0) {
    std::printf("  pytorch      %10.0f tok/s  (torch.compile, SDPA, fused AdamW)\n", peer_tps);
    std::printf("  ratio        %10.2fx (titan graph / pytorch)\n", titan.tokens_per_second / peer_tps);
  }
  results["train"] = {{"titan_eager_tokens_per_second", eager.tokens_per_second},
                      {"titan_eager_step_seconds", eager.step_seconds},
                      {"titan_eager_host_seconds", eager.host_seconds},
                      {"titan_graph_step_seconds", titan.step_seconds},
                      {"titan_graph_host_seconds", titan.host_seconds},
                      {"titan_tokens_per_second", titan.tokens_per_second},
                      {"titan_tflops", titan.tflops},
                      {"titan_mfu_percent", titan.mfu},
                      {"torch_tokens_per_second", peer_tps},
                      {"ratio", peer_tps > 0 ? titan.tokens_per_second / peer_tps : 0.0}};
  write_json_report(o.json_path, results);
  return 0;
}

}  // namespace titan::bench
