// `titan bench kv-cache`: the bytes per token of DeepSeek-V3's latent (MLA)
// KV cache against ordinary per-head keys and values and grouped-query ones
// at the same shape, as titan's Decoder::make_cache allocates them.
#pragma once

#include <cstdint>
#include <string>

namespace titan::bench {

struct KvCacheBenchOptions {
  std::string flavor = "671B";  // a deepseek_v3 flavor
  int64_t positions = 4096;     // the cache's capacity (one sequence)
  int64_t gqa_kv_heads = 8;     // the grouped-query baseline's key/value heads
  std::string json_path;
};

int run_kv_cache_bench(const KvCacheBenchOptions& options);

}  // namespace titan::bench
