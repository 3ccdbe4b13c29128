// Pipeline parallelism's split of a model into parts, one per stage, as
// lists of the registry's top-level module FQNs ("tok_embeddings",
// "layers.3", "norm", "output"). TorchTitan's rule: the first and last
// stages count their embedding and head as `first_stage_less_layers` and
// `last_stage_less_layers` layers, and the layers left are spread evenly,
// earlier stages taking the remainder. A part keeps its modules' FQNs, so
// parameters are named as in the whole model and checkpoints ignore the split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace titan::models {

using ModelParts = std::vector<std::vector<std::string>>;

// `module_fqns` in forward order: modules before the first "layers.*" belong
// to the first stage, modules after the last one to the last stage.
ModelParts split_module_fqns(const std::vector<std::string>& module_fqns, int64_t stages,
                             int64_t first_stage_less_layers, int64_t last_stage_less_layers);

// Every module exactly once, parts in forward order, none empty; errors name
// parallelism.module_fqns_per_model_part and the module.
void check_model_parts(const ModelParts& parts, const std::vector<std::string>& module_fqns);

// How many stages the job has: module_fqns_per_model_part's count when given,
// else from pipeline_parallel_layers_per_stage (> 0), else `stages_per_rank`
// per pipeline rank. Checks the count is a multiple of the pipeline degree.
int64_t pipeline_stage_count(int64_t pipeline_degree, int64_t explicit_parts, int64_t layers_per_stage,
                             int64_t n_layers, int64_t first_stage_less_layers, int64_t last_stage_less_layers,
                             int64_t stages_per_rank);

}  // namespace titan::models
