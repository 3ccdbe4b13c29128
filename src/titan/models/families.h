// Every model family, one line each. A family is its folder models/<name>/,
// which defines models::<name>::spec() (its flavors and config tree, on the
// shared decoder: flavors.cpp) and models::<name>::hf_family() (its Hugging
// Face names and conventions: hf_family.cpp), and its line here. The list
// drives the model registry (model_spec.cpp), the Hugging Face family list
// (hf/hf_config.cpp, which the config.json fuzzer compiles without tensor
// code) and the tests and benchmarks that run every family.
#pragma once

#define TITAN_MODEL_FAMILIES(X) \
  X(llama3)                     \
  X(qwen3)                      \
  X(qwen3_moe)                  \
  X(mistral)                    \
  X(qwen2)                      \
  X(gemma2)                     \
  X(gemma3)                     \
  X(olmo2)                      \
  X(phi3)
