// `titan bench gpu`: the CUDA backend on one GPU, each number beside a peer
// measured in the same run: GEMM at the model's shapes against cuBLAS's own
// large-square peak, attention forward+backward, and training a Llama 3
// flavor against the same model trained by PyTorch (bench/gpu_train_peer.py:
// bf16 autocast, torch.compile, SDPA flash attention, fused AdamW).
#pragma once

#include <cstdint>
#include <string>

namespace titan::bench {

struct GpuBenchOptions {
  std::string flavor = "1B";  // llama3 flavor trained
  int64_t seq_len = 4096;
  int64_t batch = 2;  // local batch
  int steps = 20;     // timed training steps (median reported)
  int warmup = 3;
  int repeats = 5;  // GEMM and attention timings (median)
  bool peer = true;
  std::string python = "python3";  // the interpreter with CUDA PyTorch
  std::string json_path;
};

int run_gpu_bench(const GpuBenchOptions& options);

}  // namespace titan::bench
