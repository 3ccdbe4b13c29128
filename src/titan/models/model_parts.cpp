#include "titan/models/model_parts.h"

#include <algorithm>
#include <set>

#include "titan/core/error.h"

namespace titan::models {
namespace {

bool is_layer(const std::string& fqn) { return fqn.starts_with("layers."); }

}  // namespace

ModelParts split_module_fqns(const std::vector<std::string>& module_fqns, int64_t stages,
                             int64_t first_stage_less_layers, int64_t last_stage_less_layers) {
  TITAN_CHECK(stages >= 1, "pipeline: {} stages", stages);
  std::vector<std::string> head, layers, tail;
  for (const std::string& fqn : module_fqns) {
    if (is_layer(fqn)) {
      layers.push_back(fqn);
    } else {
      (layers.empty() ? head : tail).push_back(fqn);
    }
  }
  if (stages == 1) return {module_fqns};
  const int64_t n_layers = static_cast<int64_t>(layers.size());
  const int64_t effective = n_layers + first_stage_less_layers + last_stage_less_layers;
  TITAN_CHECK(stages <= effective,
              "pipeline: {} stages for {} layers (+ {} for the first stage's embedding, + {} for the last stage's "
              "head): every stage needs at least one (lower parallelism.pipeline_parallel_degree or raise "
              "pipeline_parallel_layers_per_stage)",
              stages, n_layers, first_stage_less_layers, last_stage_less_layers);
  const int64_t per_stage = effective / stages, extra = effective % stages;
  TITAN_CHECK(first_stage_less_layers <= per_stage && last_stage_less_layers <= per_stage,
              "pipeline: parallelism.pipeline_parallel_first_stage_less_layers {} and last_stage_less_layers {} must "
              "not exceed the {} layers each of the {} stages gets",
              first_stage_less_layers, last_stage_less_layers, per_stage, stages);
  ModelParts parts(static_cast<size_t>(stages));
  size_t next = 0;
  for (int64_t stage = 0; stage < stages; ++stage) {
    std::vector<std::string>& part = parts[static_cast<size_t>(stage)];
    int64_t count = per_stage + (stage < extra ? 1 : 0);
    if (stage == 0) {
      part = head;
      count -= first_stage_less_layers;
    }
    if (stage == stages - 1) count -= last_stage_less_layers;
    for (int64_t i = 0; i < count && next < layers.size(); ++i) part.push_back(layers[next++]);
    if (stage == stages - 1) {
      // Whatever rounding left goes to the last stage rather than being lost.
      while (next < layers.size()) part.push_back(layers[next++]);
      part.insert(part.end(), tail.begin(), tail.end());
    }
  }
  return parts;
}

void check_model_parts(const ModelParts& parts, const std::vector<std::string>& module_fqns) {
  const char* key = "parallelism.module_fqns_per_model_part";
  std::vector<std::string> flat;
  for (size_t p = 0; p < parts.size(); ++p) {
    TITAN_CHECK(!parts[p].empty(), "{}: part {} is empty", key, p);
    flat.insert(flat.end(), parts[p].begin(), parts[p].end());
  }
  std::set<std::string> seen;
  for (const std::string& fqn : flat) {
    TITAN_CHECK(std::find(module_fqns.begin(), module_fqns.end(), fqn) != module_fqns.end(),
                "{}: '{}' is not a module of this model (its modules: {})", key, fqn, fmt::join(module_fqns, ", "));
    TITAN_CHECK(seen.insert(fqn).second, "{}: '{}' is in more than one part", key, fqn);
  }
  for (const std::string& fqn : module_fqns) {
    TITAN_CHECK(seen.count(fqn), "{}: module '{}' is in no part", key, fqn);
  }
  // Stages run in order, each feeding the next: the parts must be the model's modules in forward order.
  for (size_t i = 0; i < flat.size(); ++i) {
    TITAN_CHECK(flat[i] == module_fqns[i],
                "{}: the parts must list the modules in forward order; '{}' comes where '{}' should", key, flat[i],
                module_fqns[i]);
  }
}

int64_t pipeline_stage_count(int64_t pipeline_degree, int64_t explicit_parts, int64_t layers_per_stage,
                             int64_t n_layers, int64_t first_stage_less_layers, int64_t last_stage_less_layers,
                             int64_t stages_per_rank) {
  int64_t stages = pipeline_degree * stages_per_rank;
  if (explicit_parts > 0) {
    stages = explicit_parts;
  } else if (layers_per_stage > 0) {
    const int64_t effective = n_layers + first_stage_less_layers + last_stage_less_layers;
    stages = (effective + layers_per_stage - 1) / layers_per_stage;
  }
  TITAN_CHECK(stages % pipeline_degree == 0,
              "pipeline: {} stages do not split evenly over parallelism.pipeline_parallel_degree {} ranks (set "
              "pipeline_parallel_layers_per_stage or module_fqns_per_model_part to give each rank as many)",
              stages, pipeline_degree);
  return stages;
}

}  // namespace titan::models
