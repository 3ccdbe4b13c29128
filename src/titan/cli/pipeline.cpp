// `titan pipeline show`: a pipeline-parallel schedule (generated, or read from
// a CSV) checked, timed with unit costs and drawn rank by rank, with its
// bubble fraction: what to look at before choosing
// parallelism.pipeline_parallel_schedule, or before handing titan a custom one.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "titan/cli/numeric_checks.h"
#include "titan/cli/subcommands.h"
#include "titan/core/error.h"
#include "titan/parallel/pipeline_schedule.h"
#include "titan/parallel/pipeline_schedule_check.h"
#include "titan/parallel/pipeline_schedule_csv.h"

namespace titan::cli {

namespace {
struct PipelineArguments {
  std::string schedule = "1F1B", csv, export_csv;
  int ranks = 0, stages = 0, microbatches = 0;
  double forward_cost = 1, input_cost = 1, weight_cost = 1;
};

namespace pp = parallel::pipeline;

pp::Schedule schedule_from(const PipelineArguments& args) {
  if (!args.csv.empty()) {
    pp::Schedule schedule = pp::read_schedule_csv(args.csv, args.stages, args.microbatches);
    TITAN_CHECK(args.ranks == 0 || args.ranks == schedule.ranks, "--ranks {} but '{}' has {} lines (one per rank)",
                args.ranks, args.csv, schedule.ranks);
    return schedule;
  }
  const int per_rank = pp::stages_per_rank(args.schedule);
  int ranks = args.ranks, stages = args.stages;
  if (ranks == 0 && stages == 0) ranks = 4;
  if (ranks == 0) {
    TITAN_CHECK(stages % per_rank == 0,
                "--stages {} does not split into {} stages per rank as {} places them; give --ranks as well", stages,
                per_rank, args.schedule);
    ranks = stages / per_rank;
  }
  if (stages == 0) stages = ranks * per_rank;
  return pp::generate_schedule(args.schedule, ranks, stages, args.microbatches > 0 ? args.microbatches : 8);
}
}  // namespace

Subcommand make_pipeline_subcommand() {
  auto args = std::make_shared<PipelineArguments>();
  Subcommand subcommand;
  subcommand.add = [args](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("pipeline", "inspect pipeline-parallel schedules");
    app->require_subcommand(1);
    CLI::App* show = app->add_subcommand(
        "show", "check a pipeline schedule and print each rank's actions over time and its bubble fraction");
    auto* schedule = show->add_option("--schedule", args->schedule,
                                      "GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble or ZBVZeroBubble (as "
                                      "parallelism.pipeline_parallel_schedule)")
                         ->capture_default_str();
    show->add_option("--ranks", args->ranks,
                     "pipeline ranks (parallelism.pipeline_parallel_degree); default: --stages divided by the "
                     "schedule's stages per rank, or 4 when --stages is not given either")
        ->check(at_least(1));
    show->add_option("--stages", args->stages,
                     "total pipeline stages (model chunks) over all ranks; default: ranks x the schedule's stages per "
                     "rank (1 for GPipe and 1F1B, 2 for the others). So `--schedule ZBVZeroBubble --stages 4` is 2 "
                     "ranks holding a V of 2 stages each")
        ->check(at_least(1));
    show->add_option("--microbatches", args->microbatches,
                     "micro-batches per step (default 8; with --csv: the largest in the file + 1)")
        ->check(at_least(1));
    auto* csv = show->add_option("--csv", args->csv,
                                 "read the schedule from this CSV instead (PyTorch pipelining layout: one line per "
                                 "rank, actions like 0F3, 1I0, 2SEND_F5)");
    csv->excludes(schedule);
    show->add_option("--export-csv", args->export_csv, "also write the schedule to this CSV file");
    show->add_option("--forward-cost", args->forward_cost, "time of one stage's forward (F)")
        ->capture_default_str()
        ->check(greater_than(0));
    show->add_option("--backward-input-cost", args->input_cost, "time of a backward input (I); B costs I + W")
        ->capture_default_str()
        ->check(greater_than(0));
    show->add_option("--backward-weight-cost", args->weight_cost, "time of a backward weight (W)")
        ->capture_default_str()
        ->check(greater_than(0));
    return app;
  };
  subcommand.run = [args] {
    const pp::Schedule schedule = schedule_from(*args);
    const pp::Timeline timeline =
        pp::simulate_schedule(schedule, args->forward_cost, args->input_cost, args->weight_cost);  // checks it
    std::printf("%s", pp::render_timeline(schedule, timeline).c_str());
    if (!args->export_csv.empty()) {
      std::ofstream out(args->export_csv);
      out << pp::schedule_csv(schedule);
      out.close();
      TITAN_CHECK(out.good(), "cannot write pipeline schedule '{}'", args->export_csv);
      std::printf("wrote %s\n", args->export_csv.c_str());
    }
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
