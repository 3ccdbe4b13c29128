// Text generation with a trained decoder: a KV cache so each new token costs
// one token's forward, and greedy, temperature, top-k and top-p sampling.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "titan/models/decoder.h"

namespace titan::models {

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0: greedy (argmax)
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // nucleus: smallest set of tokens whose probability reaches top_p
  uint64_t seed = 0;
  std::vector<int64_t> stop_tokens;  // generation ends after emitting one of these
};

// The next token for one row of logits. `uniform` in [0, 1) drives the draw
// (ignored when greedy), so a sampler is a pure function a test can check.
int64_t sample_token(std::span<const float> logits, const SamplingOptions& options, double uniform);

// Generation by several ranks at once (`titan generate` under mpirun): the
// KV heads each rank holds (tensor parallelism splits every layer's over
// `head_split` ranks), and how the ranks agree on each new token: `agree`
// takes this rank's choice and returns the one every rank goes on with
// (rank 0's, broadcast), so ranks whose logits differ in a last bit never
// drift apart.
struct GenerationMesh {
  int64_t head_split = 1;
  std::function<int64_t(int64_t)> agree;
};

// Continues `prompt` (token ids); returns the new tokens only.
std::vector<int64_t> generate(const Decoder& model, const std::vector<int64_t>& prompt, const SamplingOptions& options,
                              const GenerationMesh& mesh = {});

}  // namespace titan::models
