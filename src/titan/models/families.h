// Every model family, one line each. A family is its folder models/<name>/,
// which defines models::<name>::spec() (its flavors and config tree, on the
// shared decoder: flavors.cpp) and models::<name>::hf_family() (its Hugging
// Face names and conventions: hf_family.cpp), and its line here. The list
// drives the model registry (model_spec.cpp), the Hugging Face family list
// (hf/hf_config.cpp, which the config.json fuzzer compiles without tensor
// code) and the tests and benchmarks that run every family. A family without
// a Hugging Face adapter defines spec() only and takes its line in
// TITAN_NATIVE_MODEL_FAMILIES (the registry reads both lists; its
// ModelSpec::hf_family is null).
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
  X(phi3)                       \
  X(deepseek_v3)                \
  X(gpt_oss)                    \
  X(muse_glimmer)               \
  X(qwen3_5)

// Families with no Hugging Face adapter (their folder defines spec() only):
// in the model registry, not in the Hugging Face family list.
#define TITAN_NATIVE_MODEL_FAMILIES(X)
