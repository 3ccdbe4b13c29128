// Draws parameters from their init rules. A parameter's values depend only on
// the seed, its fully qualified name and each element's index in the whole
// (unsharded) parameter: the name picks a Philox stream, the index the
// counter. So a rank that holds a shard (nn::ShardLayout) draws exactly the
// numbers one process would hold there, under any FSDP/TP/PP/EP/CP layout.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "titan/nn/module.h"

namespace titan::nn {

// The Philox stream of a parameter: a 64-bit FNV-1a hash of its fully qualified name.
uint64_t parameter_stream(std::string_view fully_qualified_name);

// Draws one parameter's stored tensor (its shard, if sharded) from its rule.
// Meta tensors are left as they are. Throws if the parameter has no rule.
void initialize_parameter(Parameter& parameter, const std::string& fully_qualified_name, uint64_t seed);

// Every parameter under `module`; `prefix` is the module's own fully
// qualified name with its trailing dot ("" for a model's root).
void initialize(Module& module, uint64_t seed, const std::string& prefix = "");

}  // namespace titan::nn
