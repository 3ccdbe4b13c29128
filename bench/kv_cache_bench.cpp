#include "bench/kv_cache_bench.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/json_report.h"
#include "titan/core/error.h"
#include "titan/models/decoder.h"
#include "titan/models/memory_estimate.h"
#include "titan/models/model_spec.h"

namespace titan::bench {
namespace kv_cache_bench {

// What make_cache allocates for one sequence of `positions` in bf16, built on
// the meta device (shapes only, so the 671B model costs nothing): per layer
// its key-side and value-side tensors, summed over layers.
struct CacheBytes {
  double keys = 0, values = 0, first_keys = 0, first_values = 0;
};

CacheBytes allocated(const models::DecoderConfig& config, int64_t positions) {
  const models::KVCache cache = config.build(Device::meta())->make_cache(1, positions, DType::bf16);
  CacheBytes bytes;
  for (size_t i = 0; i < cache.keys.size(); ++i) {
    bytes.keys += static_cast<double>(cache.keys[i].nbytes());
    bytes.values += static_cast<double>(cache.values[i].nbytes());
  }
  bytes.first_keys = static_cast<double>(cache.keys.front().nbytes());
  bytes.first_values = static_cast<double>(cache.values.front().nbytes());
  return bytes;
}

// The same model with ordinary attention in every layer: `kv_heads` key and
// value heads of `head_dim` (the latent projections dropped).
models::DecoderConfig with_plain_attention(models::DecoderConfig config, int64_t kv_heads, int64_t head_dim) {
  config.edit_layers([&](nn::TransformerBlockConfig& layer) {
    layer.mla.reset();
    layer.attention.n_kv_heads = kv_heads;
    layer.attention.head_dim = head_dim;
  });
  return config;
}

struct CacheRow {
  std::string cache, what;
  double per_token_layer = 0, per_token = 0;
};

}  // namespace kv_cache_bench

int run_kv_cache_bench(const KvCacheBenchOptions& o) {
  using kv_cache_bench::allocated;
  using kv_cache_bench::CacheBytes;
  using kv_cache_bench::with_plain_attention;
  const models::DecoderConfig mla = models::model_config("deepseek_v3", o.flavor);
  const nn::TransformerBlockConfig& block = mla.layers.front();
  TITAN_CHECK(block.mla, "kv-cache bench: deepseek_v3 {} has no latent attention", o.flavor);
  const int64_t heads = block.attention.n_heads, layers = mla.n_layers();
  const int64_t qk_dim = block.mla->qk_nope_head_dim + block.mla->qk_rope_head_dim, v_dim = block.mla->v_head_dim;
  TITAN_CHECK(heads % o.gqa_kv_heads == 0, "kv-cache bench: {} query heads do not group into {} key/value heads", heads,
              o.gqa_kv_heads);
  const double positions = static_cast<double>(o.positions);
  std::printf(
      "titan bench kv-cache: deepseek_v3 %s (%lld layers, %lld heads, qk %lld = %lld nope + %lld rope, v %lld, "
      "kv_lora_rank %lld), bf16 caches of %lld positions for one sequence, as Decoder::make_cache allocates them "
      "(meta device)\n\n",
      o.flavor.c_str(), static_cast<long long>(layers), static_cast<long long>(heads), static_cast<long long>(qk_dim),
      static_cast<long long>(block.mla->qk_nope_head_dim), static_cast<long long>(block.mla->qk_rope_head_dim),
      static_cast<long long>(v_dim), static_cast<long long>(block.mla->kv_lora_rank),
      static_cast<long long>(o.positions));

  std::vector<kv_cache_bench::CacheRow> rows;
  const CacheBytes latent = allocated(mla, o.positions);
  rows.push_back({"MLA latent",
                  fmt::format("kv_lora_rank {} + rotated key {}", block.mla->kv_lora_rank, block.mla->qk_rope_head_dim),
                  (latent.first_keys + latent.first_values) / positions, (latent.keys + latent.values) / positions});
  // Per-head keys of qk_dim and values of v_dim: make_cache gives a plain
  // layer's keys and values one head size, so the keys come from a model with
  // heads of qk_dim and the values from one with heads of v_dim.
  for (const int64_t kv_heads : {heads, o.gqa_kv_heads}) {
    const CacheBytes k = allocated(with_plain_attention(mla, kv_heads, qk_dim), o.positions);
    const CacheBytes v = allocated(with_plain_attention(mla, kv_heads, v_dim), o.positions);
    const std::string name = kv_heads == heads ? "MHA per head" : fmt::format("GQA {}, MLA dims", kv_heads);
    rows.push_back({name, fmt::format("{} x (k {} + v {})", kv_heads, qk_dim, v_dim),
                    (k.first_keys + v.first_values) / positions, (k.keys + v.values) / positions});
  }
  // A conventional GQA model's heads of 128 (Llama 3.1 405B: 128 query heads, 8 of 128 for keys and values).
  const CacheBytes gqa = allocated(with_plain_attention(mla, o.gqa_kv_heads, 128), o.positions);
  rows.push_back({fmt::format("GQA {}, heads 128", o.gqa_kv_heads), fmt::format("{} x (k 128 + v 128)", o.gqa_kv_heads),
                  (gqa.first_keys + gqa.first_values) / positions, (gqa.keys + gqa.values) / positions});

  // titan's generation memory estimate must agree with the allocation.
  const double estimated =
      models::estimate_generation_memory(mla, DType::bf16, 1, o.positions, 0).kv_cache_bytes / positions;
  TITAN_CHECK(estimated == rows.front().per_token,
              "kv-cache bench: the estimate ({} B/token) and make_cache ({}) "
              "disagree",
              estimated, rows.front().per_token);

  std::printf("%-18s %-32s %14s %16s %14s %10s\n", "cache", "per position, per layer", "B/token/layer",
              "B/token (model)", "GiB at length", "x MLA");
  nlohmann::json results = nlohmann::json::array();
  for (const kv_cache_bench::CacheRow& r : rows) {
    const double ratio = r.per_token / rows.front().per_token;
    std::printf("%-18s %-32s %14.0f %16.0f %14.3f %9.2fx\n", r.cache.c_str(), r.what.c_str(), r.per_token_layer,
                r.per_token, r.per_token * positions / (1024.0 * 1024.0 * 1024.0), ratio);
    results.push_back({{"cache", r.cache},
                       {"layout", r.what},
                       {"bytes_per_token_per_layer", r.per_token_layer},
                       {"bytes_per_token", r.per_token},
                       {"positions", o.positions},
                       {"ratio_to_mla", ratio}});
  }
  std::printf("\n(bf16; the estimate of `titan generate`'s memory gives the same MLA bytes per token.)\n");
  write_json_report(o.json_path, results);
  return 0;
}

}  // namespace titan::bench
