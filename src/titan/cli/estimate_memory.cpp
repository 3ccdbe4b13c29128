// `titan estimate-memory --model llama3 --flavor 70B ...`: training memory per
// rank from a meta-device build (nothing is allocated); with --pp, per
// pipeline rank (its stages, and the schedule's micro-batches in flight).
#include <fmt/ranges.h>

#include <cstdio>
#include <memory>

#include "titan/cli/numeric_checks.h"
#include "titan/cli/subcommands.h"
#include "titan/models/model_spec.h"
#include "titan/train/config_loader.h"
#include "titan/train/pipeline_plan.h"
#include "titan/train/torchtitan_keys.h"

namespace titan::cli {

namespace {
struct EstimateArguments {
  std::string model = "llama3", flavor = "8B", compute_dtype = "bf16", state_dtype = "f32", ac = "none";
  std::string schedule = "1F1B", cp_rotate_method = "alltoall", reshard_after_forward = "default";
  int64_t vocab = 0, batch = 1, seq = 8192, dp_shard = 1, selective_every = 2, pp = 1, microbatch_size = 1, cp = 1,
          tp = 1, ep = 1;
  bool selective_ops = false;
};
}  // namespace

Subcommand make_estimate_memory_subcommand() {
  auto args = std::make_shared<EstimateArguments>();
  Subcommand subcommand;
  subcommand.add = [args](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("estimate-memory", "estimate training memory per rank for a model flavor");
    app->add_option("--model", args->model, fmt::format("model family ({})", fmt::join(models::model_names(), ", ")))
        ->capture_default_str();
    app->add_option("--flavor", args->flavor, "flavor (debugmodel, 1B, 8B, 70B, ...)")->capture_default_str();
    app->add_option("--vocab-size", args->vocab, "vocabulary size (0 = the flavor's)")->check(at_least(0));
    app->add_option("--batch", args->batch, "local batch size")->capture_default_str()->check(at_least(1));
    app->add_option("--seq-len", args->seq, "sequence length")->capture_default_str()->check(at_least(1));
    app->add_option("--dtype", args->compute_dtype, "compute dtype (f32, bf16)")->capture_default_str();
    app->add_option("--optimizer-state-dtype", args->state_dtype, "AdamW moment dtype")->capture_default_str();
    app->add_option("--activation-checkpoint", args->ac, "none, full, selective or offload")->capture_default_str();
    app->add_option("--selective-every", args->selective_every, "selective: every N-th block")->check(at_least(1));
    app->add_flag("--selective-ops", args->selective_ops,
                  "selective: every block, keeping the op outputs TorchTitan's per-op policy keeps "
                  "(activation_checkpoint.selective_ops)");
    app->add_option("--pp", args->pp, "pipeline parallel degree (an estimate per pipeline rank)")->check(at_least(1));
    app->add_option("--pipeline-schedule", args->schedule, "pipeline schedule (GPipe, 1F1B, Interleaved1F1B, ...)")
        ->capture_default_str();
    app->add_option("--microbatch-size", args->microbatch_size,
                    "pipeline micro-batch size (--batch / it = micro-batches)")
        ->check(at_least(1));
    app->add_option("--fsdp-reshard-after-forward", args->reshard_after_forward,
                    "with --pp: always frees each block's gathered weights after its forward and reduces each "
                    "micro-batch's gradients (default and never keep a stage's units gathered all step)")
        ->capture_default_str()
        ->check(CLI::IsMember({"default", "always", "never"}));
    app->add_option("--dp-shard", args->dp_shard, "FSDP shard degree")->capture_default_str()->check(at_least(1));
    app->add_option("--tp", args->tp, "tensor parallel degree")->capture_default_str()->check(at_least(1));
    app->add_option("--ep", args->ep, "expert parallel degree (a factor of --dp-shard x --cp)")
        ->capture_default_str()
        ->check(at_least(1));
    app->add_option("--cp", args->cp, "context parallel degree (each rank holds seq-len / cp of every sequence)")
        ->capture_default_str()
        ->check(at_least(1));
    app->add_option("--cp-rotate-method", args->cp_rotate_method, "context parallelism: allgather or alltoall")
        ->capture_default_str()
        ->check(CLI::IsMember({"allgather", "alltoall"}));
    return app;
  };
  subcommand.run = [args] {
    args->model = train::titan_family(args->model, args->flavor);
    const models::ModelSpec& spec = models::model_spec(args->model);
    const models::DecoderConfig config = models::model_config(args->model, args->flavor, args->vocab);
    models::MemoryEstimateOptions options;
    options.batch = args->batch;
    options.seq_len = args->seq;
    options.compute_dtype = parse_dtype(args->compute_dtype);
    options.optimizer_state_dtype = parse_dtype(args->state_dtype);
    options.activation_checkpoint = args->ac;
    options.selective_every = args->selective_every;
    options.selective_ops = args->selective_ops;
    options.dp_shard = args->dp_shard;
    options.tp = args->tp;
    options.cp = args->cp;
    options.ep = args->ep;
    TITAN_CHECK((args->dp_shard * args->cp) % args->ep == 0, "--ep {} must divide --dp-shard x --cp ({})", args->ep,
                args->dp_shard * args->cp);
    options.cp_rotate_method = args->cp_rotate_method;
    TITAN_CHECK(args->ac == "none" || args->ac == "full" || args->ac == "selective" || args->ac == "offload",
                "--activation-checkpoint must be none, full, selective or offload, got '{}'", args->ac);
    std::printf(
        "%s %s, batch %lld x seq %lld, %s compute, FSDP %lld%s%s\n", args->model.c_str(), args->flavor.c_str(),
        static_cast<long long>(args->batch), static_cast<long long>(args->seq), args->compute_dtype.c_str(),
        static_cast<long long>(args->dp_shard),
        fmt::format("{}{}", args->tp > 1 ? fmt::format(" x TP {}", args->tp) : "",
                    args->ep > 1 ? fmt::format(", EP {}", args->ep) : "")
            .c_str(),
        args->cp > 1
            ? fmt::format(", CP {} ({}; FSDP shards over dp_shard x cp)", args->cp, args->cp_rotate_method).c_str()
            : "");
    if (args->pp == 1) {
      std::printf("%s", models::format_memory_estimate(spec.memory_estimate(config, options)).c_str());
      return 0;
    }
    // The job's pipeline as training would plan it; each rank's stages and in-flight micro-batches.
    train::JobConfig job;
    job.model.name = args->model;
    job.training.local_batch_size = args->batch;
    job.parallelism.pipeline_parallel_degree = args->pp;
    job.parallelism.pipeline_parallel_schedule = args->schedule;
    job.parallelism.pipeline_parallel_microbatch_size = args->microbatch_size;
    train::validate(job);
    options.batch = args->microbatch_size;
    options.pipeline_reshards = args->reshard_after_forward == "always";
    std::printf("pipeline: %lld ranks, %s, %lld micro-batches of %lld\n", static_cast<long long>(args->pp),
                args->schedule.c_str(), static_cast<long long>(train::pipeline_microbatches(job)),
                static_cast<long long>(args->microbatch_size));
    for (int rank = 0; rank < args->pp; ++rank) {
      options.pipeline = train::plan_pipeline(job, spec, config, rank);
      std::vector<std::string> modules;
      for (int stage : options.pipeline->schedule.stages_of(rank)) {
        const auto& part = options.pipeline->parts[static_cast<size_t>(stage)];
        modules.push_back(fmt::format("stage {}: {}", stage, fmt::join(part, " ")));
      }
      std::printf("\npipeline rank %d (%s)\n%s", rank, fmt::format("{}", fmt::join(modules, "; ")).c_str(),
                  models::format_memory_estimate(spec.memory_estimate(config, options)).c_str());
    }
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
