#include "titan/train/pipeline_plan.h"

#include <sstream>

#include "titan/parallel/pipeline_schedule_check.h"
#include "titan/parallel/pipeline_schedule_csv.h"

namespace titan::train {
namespace {

namespace pipeline = parallel::pipeline;

// "tok_embeddings layers.0" -> {"tok_embeddings", "layers.0"}.
std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream stream(text);
  for (std::string word; stream >> word;) words.push_back(word);
  return words;
}

}  // namespace

int64_t pipeline_microbatches(const JobConfig& config) {
  return config.training.local_batch_size / config.parallelism.pipeline_parallel_microbatch_size;
}

models::PipelinePlacement plan_pipeline(const JobConfig& config, const models::ModelSpec& spec,
                                        const models::DecoderConfig& model, int rank) {
  const ParallelismSection& p = config.parallelism;
  const int ranks = static_cast<int>(p.pipeline_parallel_degree);
  const std::vector<std::string> fqns = spec.module_fqns(model);
  models::ModelParts explicit_parts;
  for (const std::string& part : p.module_fqns_per_model_part) explicit_parts.push_back(split_words(part));
  const int64_t microbatches = pipeline_microbatches(config);

  models::PipelinePlacement placement;
  placement.rank = rank;
  pipeline::Schedule& schedule = placement.schedule;
  if (!p.pipeline_parallel_schedule_csv.empty()) {
    // The file fixes the stage count unless the parts or layers_per_stage do.
    int64_t stages = static_cast<int64_t>(explicit_parts.size());
    if (stages == 0 && p.pipeline_parallel_layers_per_stage > 0) {
      stages = models::pipeline_stage_count(ranks, 0, p.pipeline_parallel_layers_per_stage, model.n_layers(),
                                            p.pipeline_parallel_first_stage_less_layers,
                                            p.pipeline_parallel_last_stage_less_layers, 1);
    }
    schedule = pipeline::read_schedule_csv(p.pipeline_parallel_schedule_csv, static_cast<int>(stages),
                                           static_cast<int>(microbatches));
    TITAN_CHECK(schedule.ranks == ranks,
                "parallelism.pipeline_parallel_schedule_csv {}: {} ranks' lines, but pipeline_parallel_degree is {}",
                p.pipeline_parallel_schedule_csv, schedule.ranks, ranks);
    TITAN_CHECK(schedule.microbatches == microbatches,
                "parallelism.pipeline_parallel_schedule_csv {}: {} micro-batches, but local_batch_size {} / "
                "pipeline_parallel_microbatch_size {} = {}",
                p.pipeline_parallel_schedule_csv, schedule.microbatches, config.training.local_batch_size,
                p.pipeline_parallel_microbatch_size, microbatches);
  } else {
    const int64_t stages = models::pipeline_stage_count(
        ranks, static_cast<int64_t>(explicit_parts.size()), p.pipeline_parallel_layers_per_stage, model.n_layers(),
        p.pipeline_parallel_first_stage_less_layers, p.pipeline_parallel_last_stage_less_layers,
        pipeline::stages_per_rank(p.pipeline_parallel_schedule));
    schedule = pipeline::generate_schedule(p.pipeline_parallel_schedule, ranks, static_cast<int>(stages),
                                           static_cast<int>(microbatches));
  }
  // Nothing runs before the whole schedule is known to finish.
  pipeline::check_schedule(schedule);

  placement.parts = explicit_parts.empty()
                        ? models::split_module_fqns(fqns, schedule.stages, p.pipeline_parallel_first_stage_less_layers,
                                                    p.pipeline_parallel_last_stage_less_layers)
                        : explicit_parts;
  TITAN_CHECK(static_cast<int>(placement.parts.size()) == schedule.stages,
              "parallelism.module_fqns_per_model_part has {} parts, the schedule {} stages", placement.parts.size(),
              schedule.stages);
  models::check_model_parts(placement.parts, fqns);
  TITAN_CHECK(!model.tie_embeddings || schedule.stage_rank.front() == schedule.stage_rank.back(),
              "pipeline parallelism: {} ties its output projection to the embeddings, so the first and last stages "
              "must be on one rank (ZBVZeroBubble's V puts them both on rank 0); the {} schedule puts them on ranks "
              "{} and {}",
              config.model.name, schedule.name, schedule.stage_rank.front(), schedule.stage_rank.back());
  for (const nn::TransformerBlockConfig& layer : model.layers) {
    // Hugging Face's auxiliary loss is one formula over every MoE layer, which no stage holds all of.
    TITAN_CHECK(!layer.moe || layer.moe->aux_loss_coef == 0.0,
                "pipeline parallelism with model.moe_aux_loss_coef {}: the auxiliary loss spans every stage's "
                "layers; set it to 0 and balance with model.moe_load_balance_coeff (the aux-loss-free bias)",
                layer.moe ? layer.moe->aux_loss_coef : 0.0);
  }
  return placement;
}

}  // namespace titan::train
