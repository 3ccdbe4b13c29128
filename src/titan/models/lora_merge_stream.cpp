#include "titan/models/lora_merge_stream.h"

namespace titan::models {

LoraMergeStream::LoraMergeStream(Decoder& model) {
  for (const LoraAdapted& adapted : lora_adapters(model)) {
    roles_[adapted.linear->weight] = {adapted.module, Role::weight};
    roles_[adapted.adapter->lora_A->weight] = {adapted.module, Role::a};
    roles_[adapted.adapter->lora_B->weight] = {adapted.module, Role::b};
    Waiting& waiting = waiting_[adapted.module];
    waiting.weight = adapted.linear->weight;
    waiting.scale = adapted.adapter->config.scale();
  }
}

void LoraMergeStream::take(nn::Parameter* parameter, const Tensor& full, const Use& use) {
  const auto role = roles_.find(parameter);
  if (role == roles_.end()) {
    use(parameter, full);
    return;
  }
  const auto& [module, kind] = role->second;
  const auto found = waiting_.find(module);
  TITAN_CHECK(found != waiting_.end(), "LoRA export: {} came by after it was merged", module);
  Waiting& waiting = found->second;
  Tensor& slot = kind == Role::weight ? waiting.w : kind == Role::a ? waiting.a : waiting.b;
  TITAN_CHECK(!slot.defined(), "LoRA export: a tensor of {} came by twice", module);
  slot = full;
  if (!waiting.w.defined() || !waiting.a.defined() || !waiting.b.defined()) return;
  const Tensor base = waiting.w;
  TITAN_CHECK(base.dim() == 2 && base.size(0) == waiting.b.size(0) && base.size(1) == waiting.a.size(1),
              "LoRA export: {}.weight {} is not whole (merging needs the gathered weight)", module,
              shape_str(base.shape()));
  const Tensor merged = nn::lora_merged_weight(base, waiting.a, waiting.b, waiting.scale);
  adapters_[module] = {waiting.a, waiting.b};
  nn::Parameter* weight = waiting.weight;
  waiting_.erase(found);
  use(weight, merged);
}

void LoraMergeStream::check_done() const {
  TITAN_CHECK(waiting_.empty(), "LoRA export: {} never came by whole with its adapter", waiting_.begin()->first);
}

}  // namespace titan::models
