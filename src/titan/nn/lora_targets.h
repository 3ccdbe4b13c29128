// The projections LoRA can adapt, by the short names a job config uses (q, k,
// v, o, gate, up, down) or Hugging Face's module names (q_proj, ..., the
// names PEFT's target_modules takes). Header-only: config validation uses it
// without linking the model code.
#pragma once

#include <array>
#include <optional>
#include <string>

namespace titan::nn {

struct LoraTarget {
  const char* name;     // the job config's short name
  const char* hf_name;  // Hugging Face's module name, what adapter_config.json lists
  const char* module;   // where it sits in a titan block: attention.wq, feed_forward.w1, ...
};

inline constexpr std::array<LoraTarget, 7> kLoraTargets{{
    {"q", "q_proj", "attention.wq"},
    {"k", "k_proj", "attention.wk"},
    {"v", "v_proj", "attention.wv"},
    {"o", "o_proj", "attention.wo"},
    {"gate", "gate_proj", "feed_forward.w1"},
    {"up", "up_proj", "feed_forward.w3"},
    {"down", "down_proj", "feed_forward.w2"},
}};

// The target a config name (short or Hugging Face) means; nullopt for neither.
inline std::optional<LoraTarget> find_lora_target(const std::string& name) {
  for (const LoraTarget& target : kLoraTargets) {
    if (name == target.name || name == target.hf_name) return target;
  }
  return std::nullopt;
}

}  // namespace titan::nn
