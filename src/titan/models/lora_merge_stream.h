// A LoRA model's merged export, streamed: whole parameters come by one at a
// time (gathered one FSDP unit at a time), and each adapted weight is held
// only until its A and B have come too (they share its unit), then handed on
// as W + scale B A. The adapters are kept whole (rank r: small) for the PEFT
// adapter file, and not handed on. No rank holds more than a unit's weights.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "titan/models/lora_plan.h"

namespace titan::models {

class LoraMergeStream {
 public:
  using Use = std::function<void(nn::Parameter*, const Tensor&)>;
  explicit LoraMergeStream(Decoder& model);
  // One whole parameter of the model: handed to `use` at once, or (an
  // adapted weight) once merged, or (an adapter) kept.
  void take(nn::Parameter* parameter, const Tensor& full, const Use& use);
  // Every adapted weight has been merged and handed on (an error names one that has not).
  void check_done() const;
  const WholeAdapters& adapters() const { return adapters_; }

 private:
  enum class Role { weight, a, b };
  struct Waiting {
    nn::Parameter* weight = nullptr;
    Tensor w, a, b;
    double scale = 1.0;
  };
  std::map<nn::Parameter*, std::pair<std::string, Role>> roles_;  // adapted weights and adapters, by module
  std::map<std::string, Waiting> waiting_;
  WholeAdapters adapters_;
};

}  // namespace titan::models
