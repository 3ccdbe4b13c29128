// `titan bench tokenizer`: encode throughput (MB/s, one thread and all
// threads) on English text, side by side with the npm `tiktoken` (WASM)
// encoder run by Node on the same text in the same run; and the time to train
// 8K BPE merges on 5 MB of English.
#pragma once

#include <string>

namespace titan::bench {

struct TokenizerBenchOptions {
  std::string encoding = "cl100k_base";  // a built-in tiktoken encoding (the peer has it too)
  std::string text_path;                 // default: the fortunes corpus, repeated to `megabytes`
  double megabytes = 4;
  int repeats = 5;
  int threads = 0;     // the "all threads" run; 0 = all cores
  bool quick = false;  // 1 MB, 3 repeats, 1K merges on 1 MB
  bool train = true;   // also time BPE training
  std::string json_path;
};

int run_tokenizer_bench(const TokenizerBenchOptions& options);

}  // namespace titan::bench
