// `titan bench flux`: a FLUX training step (forward, rectified-flow loss,
// backward, AdamW) against PyTorch in the same run (bench/flux_peer.py, the
// same shapes, f32), for flux-debug at 256 and 512 pixels (256 and 1,024
// image tokens, 256 text tokens), and the time to sample one image.
#pragma once

#include <string>

namespace titan::bench {

struct FluxBenchOptions {
  int steps = 3;  // timed training steps (median reported)
  int warmup = 1;
  int sampling_steps = 4;  // Euler steps per sampled image (TorchTitan's debug validation: 4)
  bool quick = false;      // a width-256 model instead of flux-debug's 1536
  bool peer = true;
  std::string json_path;
};

int run_flux_bench(const FluxBenchOptions& options);

}  // namespace titan::bench
