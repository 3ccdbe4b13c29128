#include "titan/nn/initialize.h"

#include "titan/core/copy.h"
#include "titan/ops/random.h"

namespace titan::nn {

uint64_t parameter_stream(std::string_view fully_qualified_name) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : fully_qualified_name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

namespace {

RandomBox box_of(const Tensor& stored, const ShardLayout& layout, const std::string& name) {
  RandomBox box;
  if (!layout.sharded()) return box;
  TITAN_CHECK(layout.global_shape.size() == static_cast<size_t>(stored.dim()) &&
                  layout.offsets.size() == layout.global_shape.size() && stored.dim() <= kMaxRandomBoxDims,
              "initialise {}: its shard {} does not fit its layout in {}", name, shape_str(stored.shape()),
              shape_str(layout.global_shape));
  box.dims = static_cast<int>(stored.dim());
  for (int d = 0; d < box.dims; ++d) {
    box.shape[d] = stored.size(d);
    box.whole[d] = layout.global_shape[static_cast<size_t>(d)];
    box.offsets[d] = layout.offsets[static_cast<size_t>(d)];
  }
  return box;
}

}  // namespace

void initialize_parameter(Parameter& parameter, const std::string& fully_qualified_name, uint64_t seed) {
  const InitRule& rule = parameter.init;
  const Tensor& stored = parameter.data;
  switch (rule.kind) {
    case InitRule::Kind::none:
      fail("initialise {}: the parameter has no init rule (its module declares one when it registers it)",
           fully_qualified_name);
    case InitRule::Kind::constant:
      titan::fill_(stored, rule.a);
      return;
    case InitRule::Kind::uniform:
    case InitRule::Kind::normal:
    case InitRule::Kind::truncated_normal:
      break;
  }
  ops::RandomSpec spec;
  spec.distribution = rule.kind == InitRule::Kind::uniform  ? ops::Distribution::uniform
                      : rule.kind == InitRule::Kind::normal ? ops::Distribution::normal
                                                            : ops::Distribution::truncated_normal;
  spec.a = rule.a;
  spec.b = rule.b;
  spec.low = rule.low;
  spec.high = rule.high;
  spec.seed = seed;
  spec.stream = parameter_stream(fully_qualified_name);
  spec.box = box_of(stored, parameter.layout, fully_qualified_name);
  ops::fill_random(stored, spec);
}

void initialize(Module& module, uint64_t seed, const std::string& prefix) {
  for (auto& [name, parameter] : module.named_parameters()) initialize_parameter(*parameter, prefix + name, seed);
}

}  // namespace titan::nn
