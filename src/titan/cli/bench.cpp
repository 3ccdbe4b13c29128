// `titan bench <suite>`: benchmarks that compare against a peer in the same run.
#include <memory>

#include "bench/checkpoint_bench.h"
#include "bench/context_parallel_bench.h"
#include "bench/delta_rule_bench.h"
#include "bench/failures_bench.h"
#include "bench/families_bench.h"
#include "bench/float8_bench.h"
#include "bench/flux_bench.h"
#include "bench/gpu_bench.h"
#include "bench/kv_cache_bench.h"
#include "bench/lora_bench.h"
#include "bench/moe_bench.h"
#include "bench/ops_bench.h"
#include "bench/pipeline_bench.h"
#include "bench/plan_bench.h"
#include "bench/plan_published.h"
#include "bench/profiler_bench.h"
#include "bench/scaling_bench.h"
#include "bench/startup_bench.h"
#include "bench/tokenizer_bench.h"
#include "bench/train_bench.h"
#include "titan/cli/numeric_checks.h"
#include "titan/cli/subcommands.h"

namespace titan::cli {

Subcommand make_bench_subcommand() {
  auto options = std::make_shared<bench::OpsBenchOptions>();
  auto tokenizer = std::make_shared<bench::TokenizerBenchOptions>();
  auto train = std::make_shared<bench::TrainBenchOptions>();
  auto scaling = std::make_shared<bench::ScalingBenchOptions>();
  auto checkpoint = std::make_shared<bench::CheckpointBenchOptions>();
  auto gpu = std::make_shared<bench::GpuBenchOptions>();
  auto moe = std::make_shared<bench::MoeBenchOptions>();
  auto pipeline = std::make_shared<bench::PipelineBenchOptions>();
  auto context = std::make_shared<bench::ContextParallelBenchOptions>();
  auto profiler = std::make_shared<bench::ProfilerBenchOptions>();
  auto lora = std::make_shared<bench::LoraBenchOptions>();
  auto families = std::make_shared<bench::FamiliesBenchOptions>();
  auto startup = std::make_shared<bench::StartupBenchOptions>();
  auto failures = std::make_shared<bench::FailuresBenchOptions>();
  auto plan = std::make_shared<bench::PlanBenchOptions>();
  auto float8 = std::make_shared<bench::Float8BenchOptions>();
  // The families suite shares --seq, --batch and --dtypes with others but has its own defaults, so it asks
  // the parsed command whether they were given.
  auto bench_app = std::make_shared<CLI::App*>(nullptr);
  auto suite = std::make_shared<std::string>();
  Subcommand subcommand;
  subcommand.add = [options, tokenizer, train, scaling, checkpoint, gpu, moe, pipeline, context, profiler, families,
                    startup, failures, plan, float8, bench_app, suite](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand(
        "bench",
        "run a benchmark suite (ops, tokenizer, train, scaling, checkpoint, moe, pipeline, context-parallel, profiler, "
        "lora, gpu, families, delta-rule, kv-cache, failures, plan, plan-published, flux, float8)");
    app->add_option(
           "suite", *suite,
           "which suite: ops, tokenizer, train, scaling, checkpoint, moe, pipeline, context-parallel, profiler, lora, "
           "gpu, families, delta-rule, kv-cache, failures, plan, plan-published, flux, float8")
        ->required()
        ->check(CLI::IsMember({"ops",        "tokenizer",
                               "train",      "scaling",
                               "checkpoint", "moe",
                               "pipeline",   "context-parallel",
                               "profiler",   "lora",
                               "gpu",        "families",
                               "startup",    "delta-rule",
                               "kv-cache",   "failures",
                               "plan",       "plan-published",
                               "flux",       "float8"}));
    *bench_app = app;
    app->add_option("--repeats", options->repeats, "timed repetitions per case (median reported)")->check(at_least(1));
    app->add_flag("--quick", options->quick, "small shapes only (smoke test)");
    app->add_option("--json", options->json_path, "also write the results to this JSON file");
    app->add_option("--encoding", tokenizer->encoding, "tokenizer suite: built-in encoding (default cl100k_base)");
    app->add_option("--text", tokenizer->text_path, "tokenizer suite: English text file (default: fortunes)");
    app->add_option("--megabytes", tokenizer->megabytes, "tokenizer suite: text size (default 4)")
        ->check(greater_than(0));
    app->add_option("--threads", tokenizer->threads, "tokenizer suite: threads of the all-threads run (0: all)")
        ->check(at_least(0));
    app->add_flag("!--no-train", tokenizer->train, "tokenizer suite: skip the BPE training measurement");
    app->add_option("--steps", train->steps, "train, families, plan and float8 suites: timed steps")
        ->check(at_least(1));
    app->add_option("--dtypes", train->dtypes,
                    "train and families suites: training dtypes (default f32 bf16; families f32)")
        ->check(CLI::IsMember({"f32", "bf16"}));
    app->add_flag("!--no-peer", train->peer,
                  "train, families, moe, gpu, flux and float8 suites: skip the PyTorch peer");
    app->add_option("--busy-cores", train->busy_cores,
                    "train suite: measure again with this many cores kept busy by other processes, and show the share "
                    "of its speed each side keeps")
        ->check(at_least(0));
    app->add_flag("!--no-scaling", moe->scaling, "moe suite: skip the expert-parallel runs");
    app->add_flag("!--no-training", float8->training,
                  "float8 suite: skip the training jobs (only the GEMMs alone at 8B widths)");
    app->add_option("--flavor", gpu->flavor, "gpu suite: llama3 flavor to train (default 1B)");
    app->add_option("--seq", gpu->seq_len,
                    "gpu, families, delta-rule, kv-cache and float8 suites: sequence length (default 4096; families "
                    "256; float8 512)")
        ->check(at_least(1));
    app->add_option("--batch", gpu->batch,
                    "gpu, families and float8 suites: local batch (default 2; families and float8 4)")
        ->check(at_least(1));
    app->add_option("--python", gpu->python, "gpu suite: Python with CUDA PyTorch for the peer (default python3)");
    app->add_option("--pp-ranks", pipeline->ranks, "pipeline suite: pipeline ranks (default 4)")->check(at_least(1));
    app->add_option("--pp-layers", pipeline->layers, "pipeline suite: layers of the model (default 16)")
        ->check(at_least(1));
    app->add_option("--microbatches", pipeline->microbatches, "pipeline suite: micro-batches per step (default 8)")
        ->check(at_least(1));
    app->add_option("--cp-ranks", context->ranks, "context-parallel suite: context-parallel ranks (default 4)")
        ->check(at_least(1));
    app->add_option("--cp-seq-len", context->seq_len, "context-parallel suite: sequence length (default 32768)")
        ->check(at_least(1));
    app->add_option("--baseline", profiler->baseline,
                    "profiler suite: a titan built with -DTITAN_PROFILER=OFF, the no-profiler case");
    app->add_option("--layers", checkpoint->layers,
                    "checkpoint and failures suites: llama3 1B blocks in the state (size)")
        ->check(at_least(0));
    app->add_option("--folder", checkpoint->folder, "checkpoint suite: where to write (removed afterwards)");
    app->add_option("--job-steps", failures->steps, "failures suite: steps of the failing job (default 500)")
        ->check(at_least(2));
    app->add_option("--failure-every", failures->failure_every,
                    "failures suite: every rank is killed once per this many steps (default 100)")
        ->check(at_least(2));
    app->add_option("--startup-flavor", startup->flavor, "startup suite: llama3 flavor on both paths (default 1B)");
    app->add_option("--startup-fsdp", startup->fsdp, "startup suite: its FSDP degree (default 4)")->check(at_least(1));
    app->add_option("--startup-weights", startup->weights,
                    "startup suite: load the compared model's weights from this HF folder or titan export");
    app->add_option("--large-flavor", startup->large_flavor,
                    "startup suite: also rank 0 of this llama3 flavor on the new path alone (e.g. 405B)");
    app->add_option("--large-fsdp", startup->large_fsdp, "startup suite: the large job's FSDP degree (default 128)")
        ->check(at_least(1));
    app->add_option("--large-tp", startup->large_tp, "startup suite: the large job's TP degree (default 8)")
        ->check(at_least(1));
    app->add_option("--models", families->models,
                    "families suite: models whose debugmodel to train (default llama3, the Hugging Face families, "
                    "muse_glimmer and qwen3_5)");
    app->add_option("--plan-ranks", plan->ranks, "plan suite: rank counts whose layouts to run (default 1 2 4)")
        ->check(CLI::IsMember({1, 2, 4}));
    return app;
  };
  subcommand.run = [options, tokenizer, train, scaling, checkpoint, gpu, moe, pipeline, context, profiler, lora,
                    families, startup, failures, plan, float8, bench_app, suite] {
    if (*suite == "float8") {
      const CLI::App& app = **bench_app;
      float8->json_path = options->json_path;
      float8->peer = train->peer;
      if (app.count("--steps") > 0) float8->steps = train->steps;
      if (app.count("--seq") > 0) float8->seq_len = gpu->seq_len;
      if (app.count("--batch") > 0) float8->local_batch = gpu->batch;
      if (options->quick) {
        float8->steps = 2;
        float8->seq_len = 64;
        float8->fsdp_seq_len = 64;
        float8->fsdp_local_batch = 1;
      }
      return bench::run_float8_bench(*float8);
    }
    if (*suite == "plan-published") {
      bench::PlanPublishedOptions published;
      published.json_path = options->json_path;
      published.quick = options->quick;  // skips the rows that search for a layout
      return bench::run_plan_published_bench(published);
    }
    if (*suite == "plan") {
      plan->json_path = options->json_path;
      if ((**bench_app).count("--steps") > 0) plan->steps = train->steps;
      if (options->quick) {
        plan->steps = 2;
        plan->warmup = 1;
        plan->moe = false;
        plan->probe_links = false;
        if ((**bench_app).count("--plan-ranks") == 0) plan->ranks = {1, 2};
      }
      return bench::run_plan_bench(*plan);
    }
    if (*suite == "kv-cache") {
      bench::KvCacheBenchOptions kv_cache;
      kv_cache.json_path = options->json_path;
      if ((**bench_app).count("--seq") > 0) kv_cache.positions = gpu->seq_len;
      return bench::run_kv_cache_bench(kv_cache);
    }
    if (*suite == "flux") {
      bench::FluxBenchOptions flux;
      flux.json_path = options->json_path;
      flux.quick = options->quick;
      flux.peer = train->peer;
      return bench::run_flux_bench(flux);
    }
    if (*suite == "delta-rule") {
      bench::DeltaRuleBenchOptions delta_rule;
      delta_rule.json_path = options->json_path;
      delta_rule.repeats = options->repeats;
      if ((**bench_app).count("--seq") > 0) delta_rule.tokens = gpu->seq_len;
      if (options->quick) delta_rule.tokens = 256;
      return bench::run_delta_rule_bench(delta_rule);
    }
    if (*suite == "startup") {
      startup->json_path = options->json_path;
      startup->repeats = options->repeats;
      if (options->quick) startup->flavor = "debugmodel";
      return bench::run_startup_bench(*startup);
    }
    if (*suite == "families") {
      const CLI::App& app = **bench_app;
      families->json_path = options->json_path;
      families->peer = train->peer;
      if (app.count("--steps") > 0) families->steps = train->steps;
      if (app.count("--dtypes") > 0) families->dtypes = train->dtypes;
      if (app.count("--seq") > 0) families->seq_len = gpu->seq_len;
      if (app.count("--batch") > 0) families->batch = gpu->batch;
      if (options->quick) {
        families->steps = 2;
        families->warmup = 1;
        families->seq_len = 64;
      }
      return bench::run_families_bench(*families);
    }
    if (*suite == "lora") {
      lora->json_path = options->json_path;
      lora->rounds = options->repeats;
      if (options->quick) {
        lora->quick = true;
        lora->steps = 2;
        lora->warmup = 1;
        lora->rounds = 1;
        lora->seq_len = 64;
      }
      return bench::run_lora_bench(*lora);
    }
    if (*suite == "profiler") {
      profiler->json_path = options->json_path;
      profiler->rounds = options->repeats;
      if (options->quick) {
        profiler->steps = 2;
        profiler->warmup = 1;
        profiler->rounds = 1;
        profiler->seq_len = 64;
      }
      return bench::run_profiler_bench(*profiler);
    }
    if (*suite == "moe") {
      moe->json_path = options->json_path;
      moe->peer = train->peer;
      moe->repeats = options->repeats;
      if (options->quick) {
        moe->repeats = 1;
        moe->warmup = 1;
        moe->large_tokens = 32;
        moe->train_steps = 1;
        moe->scaling = false;
      }
      return bench::run_moe_bench(*moe);
    }
    if (*suite == "pipeline") {
      pipeline->json_path = options->json_path;
      if (options->quick) {
        pipeline->steps = 1;
        pipeline->warmup = 1;
        pipeline->seq_len = 64;
      }
      return bench::run_pipeline_bench(*pipeline);
    }
    if (*suite == "context-parallel") {
      context->json_path = options->json_path;
      if (options->quick) {
        context->steps = 1;
        context->seq_len = 1024;
      }
      return bench::run_context_parallel_bench(*context);
    }
    if (*suite == "gpu") {
      gpu->json_path = options->json_path;
      gpu->peer = train->peer;
      gpu->repeats = options->repeats;
      if (options->quick) gpu->steps = 3;
      return bench::run_gpu_bench(*gpu);
    }
    if (*suite == "failures") {
      failures->json_path = options->json_path;
      if ((**bench_app).count("--layers") > 0) failures->layers = checkpoint->layers;
      if (options->quick) {
        failures->layers = 1;
        failures->steps = 40;
        failures->failure_every = 20;
      }
      return bench::run_failures_bench(*failures);
    }
    if (*suite == "checkpoint") {
      checkpoint->json_path = options->json_path;
      checkpoint->repeats = options->repeats;
      if (options->quick) checkpoint->layers = 0;
      return bench::run_checkpoint_bench(*checkpoint);
    }
    if (*suite == "scaling") {
      scaling->json_path = options->json_path;
      if (options->quick) scaling->steps = 3;
      return bench::run_scaling_bench(*scaling);
    }
    if (*suite == "train") {
      train->json_path = options->json_path;
      if (options->quick) {
        train->steps = 2;
        train->warmup = 1;
      }
      return bench::run_train_bench(*train);
    }
    if (*suite == "tokenizer") {
      tokenizer->repeats = options->repeats;
      tokenizer->quick = options->quick;
      tokenizer->json_path = options->json_path;
      return bench::run_tokenizer_bench(*tokenizer);
    }
    return bench::run_ops_bench(*options);
  };
  return subcommand;
}

}  // namespace titan::cli
