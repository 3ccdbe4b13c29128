// Looking inside a run, in-process: a profiled step's Chrome trace (every op,
// nested per thread, inside the step's time), goodput's parts against the wall
// time the test measures itself, and non-finite gradients named and skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "integration/cli_job.h"
#include "titan/autograd/engine.h"
#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/train/random_batches.h"
#include "titan/train/trainer.h"

namespace titan {
namespace observability_test {

namespace fs = std::filesystem;

constexpr int64_t kLayers = 6;  // llama3 debugmodel

train::JobConfig small_job(const std::string& name) {
  train::JobConfig config;
  config.job.dump_folder = ::testing::TempDir() + "/observability_" + name;
  fs::remove_all(config.job.dump_folder);
  config.training.seq_len = 64;
  config.training.local_batch_size = 2;
  config.training.steps = 3;
  config.optimizer.lr = 1e-3;
  config.metrics.peak_tflops = 1.0;
  config.metrics.progress = false;
  config.model.vocab_size = 300;
  return config;
}

train::BatchSource batches(uint64_t seed = 3) { return train::random_token_batches(2, 64, 300, seed); }

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

struct Span {
  std::string name, category;
  double start, end;
  nlohmann::json args;
};

// Every "X" event per thread, by start (outer first on ties).
std::map<int, std::vector<Span>> spans_by_thread(const nlohmann::json& trace) {
  std::map<int, std::vector<Span>> threads;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const double start = e["ts"].get<double>();
    threads[e["tid"].get<int>()].push_back(
        {e["name"], e["cat"], start, start + e["dur"].get<double>(), e.value("args", nlohmann::json::object())});
  }
  for (auto& [tid, spans] : threads) {
    std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
  }
  return threads;
}

TEST(Profiler, ProfiledStepTraceHoldsEveryOpNestedWithinTheStep) {
  train::JobConfig config = small_job("trace");
  config.profiling.enable_profiling = true;
  config.profiling.profile_freq = 2;
  config.training.steps = 2;
  train::Trainer trainer(config, batches());
  trainer.train();
  const fs::path folder = fs::path(config.job.dump_folder) / "profile_traces";
  EXPECT_FALSE(fs::exists(folder / "iteration_1")) << "step 1 is not a multiple of profile_freq";
  const fs::path path = folder / "iteration_2" / "rank0_trace.json";
  ASSERT_EQ(trainer.step_profiler().last_trace(), path.string());
  const nlohmann::json trace = read_json(path);

  const auto threads = spans_by_thread(trace);
  double step_us = -1;
  std::map<std::string, int64_t> op_calls;
  std::map<std::string, std::set<std::string>> ops_in_module;  // module span -> ops directly inside it
  for (const auto& [tid, spans] : threads) {
    // Nested: each span ends before the span enclosing it does.
    std::vector<const Span*> open;
    for (const Span& span : spans) {
      while (!open.empty() && open.back()->end <= span.start) open.pop_back();
      if (!open.empty()) {
        ASSERT_LE(span.end, open.back()->end + 1e-3)
            << span.name << " starts inside " << open.back()->name << " but ends after it (thread " << tid << ")";
      }
      if (span.category == "step") step_us = span.end - span.start;
      if (span.category == "op") {
        ++op_calls[span.name];
        for (auto it = open.rbegin(); it != open.rend(); ++it) {
          if ((*it)->category == "module" || (*it)->category == "backward") {
            ops_in_module[(*it)->category == "module" ? (*it)->name : (*it)->args.value("module", "") + " backward"]
                .insert(span.name);
            break;
          }
        }
        EXPECT_TRUE(span.args.contains("shapes") && span.args.contains("dtype") && span.args.contains("bytes") &&
                    span.args.contains("flops"))
            << span.name;
      }
      open.push_back(&span);
    }
  }
  ASSERT_GT(step_us, 0) << "the step's own span";

  // The model's structure fixes how often its ops run in one step (one micro-batch):
  // one flash attention forward and backward per layer, two RMSNorms per layer and the final one.
  EXPECT_EQ(op_calls["flash_attention"], kLayers);
  EXPECT_EQ(op_calls["flash_attention_backward"], kLayers);
  EXPECT_EQ(op_calls["rms_norm"], 2 * kLayers + 1);
  EXPECT_EQ(op_calls["rms_norm_backward"], 2 * kLayers + 1);
  EXPECT_EQ(op_calls["embedding"], 1);
  EXPECT_EQ(op_calls["embedding_backward"], 1);
  // Every linear layer (q, k, v, o, w1, w2, w3 per layer) runs one GEMM forward
  // inside its own module span, and two backward (input and weight gradients).
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    for (const char* linear : {"attention.wq", "attention.wk", "attention.wv", "attention.wo", "feed_forward.w1",
                               "feed_forward.w2", "feed_forward.w3"}) {
      const std::string module = fmt::format("layers.{}.{}", layer, linear);
      EXPECT_TRUE(ops_in_module[module].count("gemm")) << module;
    }
    const std::string attention = fmt::format("layers.{}.attention", layer);
    EXPECT_TRUE(ops_in_module[attention].count("flash_attention")) << attention;
    EXPECT_TRUE(ops_in_module[attention + " backward"].count("flash_attention_backward")) << attention;
  }
  // And the output projection before the (unfused) loss: one GEMM forward, two backward.
  EXPECT_EQ(op_calls["gemm"], 3 * (7 * kLayers + 1));

  // Top-level ops on the training thread take no more than the step.
  const int training = trace["traceEvents"][1]["tid"];  // the first thread named: the training thread
  double top_level_us = 0;
  double open_until = -1;
  for (const Span& span : threads.at(training)) {
    if (span.category != "op" || span.start < open_until) continue;
    top_level_us += span.end - span.start;
    open_until = span.end;
  }
  EXPECT_GT(top_level_us, 0);
  EXPECT_LE(top_level_us, step_us);

  // A GEMM's FLOPs are 2 m n k of its shapes (A [.., m, k], B [.., k, n]).
  bool checked_gemm = false;
  for (const Span& span : threads.at(training)) {
    if (span.name != "gemm" || span.args["shapes"].size() < 3) continue;
    const auto& a = span.args["shapes"][0];
    const auto& c = span.args["shapes"][2];
    const double m = a[a.size() - 2], k = a[a.size() - 1], n = c[c.size() - 1];
    const double batch = c.size() == 3 ? c[0].get<double>() : 1.0;
    EXPECT_DOUBLE_EQ(span.args["flops"].get<double>(), 2 * batch * m * n * k);
    checked_gemm = true;
    break;
  }
  EXPECT_TRUE(checked_gemm);
  // The trainer's phases are there.
  std::set<std::string> phases;
  for (const Span& span : threads.at(training)) {
    if (span.category == "phase") phases.insert(span.name);
  }
  for (const char* phase : {"data", "forward_backward", "clip_gradients", "optimizer"}) {
    EXPECT_TRUE(phases.count(phase)) << phase;
  }
}

// Under FSDP 2 every rank's trace holds the step's collectives with their
// bytes: the gradients' reduce-scatters take in exactly the f32 gradient of
// every parameter, and each all-gather gives out both ranks' shards.
TEST(Profiler, FsdpTraceCarriesEveryCollectiveWithItsBytes) {
  const fs::path work = fs::path(::testing::TempDir()) / "observability_fsdp";
  fs::remove_all(work / "dump");
  fs::create_directories(work);
  testing::prepare_test_corpus(work / "data", work / "prepare.log");
  const fs::path config = testing::write_tiny_llama_config(work);
  const std::string output = testing::run_ok(
      testing::mpirun(2) + testing::tiny_train_command(work / "data", config, work / "dump",
                                                       "--training.steps 1 --parallelism.data_parallel_shard_degree 2 "
                                                       "--profiling.enable_profiling true --profiling.profile_freq 1 "
                                                       "--training.mixed_precision_param f32"),
      work / "fsdp.log");
  // The parameter count as the job states it.
  const size_t at = output.find(" parameters, vocab");
  ASSERT_NE(at, std::string::npos) << output;
  const int64_t parameters = std::stoll(output.substr(output.rfind(' ', at - 1) + 1, at));
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    const nlohmann::json trace =
        read_json(work / "dump" / "profile_traces" / "iteration_1" / fmt::format("rank{}_trace.json", rank));
    int64_t reduced_in = 0, gathered_out = 0, waits = 0;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] != "X") continue;
      if (e["cat"] == "wait") ++waits;
      if (e["cat"] != "comm") continue;
      // The one integer collective: the step's trained-label count, summed over ranks.
      if (e["args"]["dtype"] == "i64") {
        EXPECT_EQ(e["name"], "all_reduce");
        EXPECT_EQ(e["args"]["bytes_in"].get<int64_t>(), 8);
        continue;
      }
      EXPECT_EQ(e["args"]["dtype"], "f32");
      if (e["name"] == "reduce_scatter") reduced_in += e["args"]["bytes_in"].get<int64_t>();
      if (e["name"] == "all_gather") {
        gathered_out += e["args"]["bytes_out"].get<int64_t>();
        EXPECT_EQ(e["args"]["bytes_out"].get<int64_t>(), 2 * e["args"]["bytes_in"].get<int64_t>());
      }
    }
    EXPECT_EQ(reduced_in, 4 * parameters);
    // Forward gathers every parameter; backward gathers again those resharded after forward.
    EXPECT_GE(gathered_out, 4 * parameters);
    EXPECT_LT(gathered_out, 2 * 4 * parameters);
    EXPECT_GT(waits, 0);
  }
}

TEST(MemorySnapshot, ProfiledStepWritesItsAllocationsWithOpAndModule) {
  train::JobConfig config = small_job("memory");
  config.profiling.enable_memory_snapshot = true;
  config.profiling.profile_freq = 2;
  config.training.steps = 2;
  train::Trainer trainer(config, batches());
  trainer.train();
  const fs::path stem = trainer.step_profiler().last_memory_snapshot();
  ASSERT_EQ(stem, fs::path(config.job.dump_folder) / "memory_snapshot" / "iteration_2" / "rank0_memory_snapshot");
  const nlohmann::json snapshot = read_json(stem.string() + ".json");
  ASSERT_FALSE(snapshot["events"].empty());
  // Each event's live bytes follow from the one before it by its own size.
  int64_t live = snapshot["devices"][0]["start_live_bytes"];
  for (const auto& event : snapshot["events"]) {
    if (event["action"] == "oom") continue;
    live += event["action"] == "alloc" ? event["bytes"].get<int64_t>() : -event["bytes"].get<int64_t>();
    ASSERT_EQ(event["live_bytes"].get<int64_t>(), live);
  }
  // At the peak (inside backward) activations saved by the layers are live, named by op and module.
  const nlohmann::json& peak = snapshot["devices"][0]["peak"];
  int64_t named = 0, in_layers = 0, with_op = 0;
  for (const auto& block : peak["blocks"]) {
    const std::string module = block["module"];
    named += !module.empty();
    in_layers += module.starts_with("layers.");
    with_op += !block["op"].get<std::string>().empty();
  }
  EXPECT_GT(in_layers, 0);
  EXPECT_GT(with_op, 0);
  EXPECT_GT(named, 0);
  const std::string html = [&] {
    std::ifstream in(stem.string() + ".html");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
}

TEST(Goodput, PartsAddUpToTheWallTimeAndARestartCountsRecomputedSteps) {
  train::JobConfig config = small_job("goodput");
  config.training.steps = 6;
  config.checkpoint.enable = true;
  config.checkpoint.interval = 4;
  config.validation.enable = false;
  {
    const auto start = std::chrono::steady_clock::now();
    train::Trainer trainer(config, batches());
    trainer.train();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const train::Goodput& g = trainer.goodput();
    EXPECT_NEAR(g.total_seconds(), wall, 0.01 * wall);
    EXPECT_GT(g.productive_seconds, 0);
    EXPECT_GT(g.startup_seconds, 0);
    EXPECT_GT(g.checkpoint_seconds, 0);
    EXPECT_EQ(g.lost_steps, 0);
  }
  // As if the job died after step 6 before its last save: the restart resumes at step 4 and does 5 and 6 again.
  fs::remove_all(fs::path(config.job.dump_folder) / config.checkpoint.folder / checkpoint::step_folder_name(6));
  config.training.steps = 8;
  const auto start = std::chrono::steady_clock::now();
  train::Trainer resumed(config, batches());
  EXPECT_EQ(resumed.step(), 4);
  resumed.train();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const train::Goodput& g = resumed.goodput();
  EXPECT_EQ(g.lost_steps, 2);
  EXPECT_GT(g.lost_seconds, 0);
  EXPECT_NEAR(g.total_seconds(), wall, 0.01 * wall);
  // The last record of metrics.jsonl is the goodput.
  std::ifstream in(fs::path(config.job.dump_folder) / "metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const nlohmann::json record = nlohmann::json::parse(last);
  ASSERT_TRUE(record.contains("goodput")) << last;
  EXPECT_EQ(record["goodput"]["lost_to_restart_steps"], 2);
  EXPECT_NEAR(record["goodput"]["wall_seconds"].get<double>(), g.total_seconds(), 1e-9);
}

// A NaN in `parameter`'s gradient at step `step`, as a bad batch or an
// overflow would leave it: a post-accumulate hook on the leaf (the public
// autograd API) counts the backwards (one per step here: no accumulation).
void inject_nonfinite_gradient(train::Trainer& trainer, int64_t step, const std::string& parameter) {
  for (auto& [name, p] : trainer.model().named_parameters()) {
    if (name != parameter) continue;
    auto backwards = std::make_shared<int64_t>(0);
    autograd::register_post_accumulate_grad_hook(p->data, [backwards, step](const Tensor& leaf) {
      if (++*backwards == step) titan::fill_(leaf.grad().view({-1}).narrow(0, 0, 1), std::nan(""));
    });
    return;
  }
  FAIL() << "no parameter " << parameter;
}

TEST(NonFinite, InjectedNanStopsNamingStepAndParameterAfterSavingACheckpoint) {
  train::JobConfig config = small_job("nan_stop");
  config.checkpoint.enable = true;
  config.checkpoint.interval = 100;
  train::Trainer trainer(config, batches());
  inject_nonfinite_gradient(trainer, 2, "layers.3.feed_forward.w2.weight");
  try {
    trainer.train();
    FAIL() << "a NaN gradient must stop the job";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("step 2"), std::string::npos) << message;
    EXPECT_NE(message.find("layers.3.feed_forward.w2.weight"), std::string::npos) << message;
    EXPECT_NE(message.find("checkpoint step-2"), std::string::npos) << message;
  }
  const fs::path saved = fs::path(config.job.dump_folder) / config.checkpoint.folder / checkpoint::step_folder_name(2);
  EXPECT_TRUE(fs::exists(saved));
  // The update was withheld: every weight is still finite.
  for (auto& [name, parameter] : trainer.model().named_parameters()) {
    for (float v : parameter->data.to_floats()) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

TEST(NonFinite, SkipNonfiniteStepsSkipsAndCountsWithoutTouchingTheWeights) {
  train::JobConfig config = small_job("nan_skip");
  config.training.skip_nonfinite_steps = true;
  config.training.steps = 3;
  train::Trainer trainer(config, batches());
  inject_nonfinite_gradient(trainer, 2, "layers.0.attention.wq.weight");
  const auto& history = trainer.train();
  ASSERT_EQ(history.size(), 3u);
  EXPECT_EQ(history[0].skipped_steps, 0);
  EXPECT_EQ(history[1].skipped_steps, 1);
  EXPECT_EQ(history[2].skipped_steps, 1);
  EXPECT_TRUE(std::isfinite(history[2].loss));
  EXPECT_EQ(trainer.goodput().skipped_steps, 1);
  // AdamW took two steps, not three (its bias corrections count updates).
  EXPECT_EQ(trainer.optimizer().steps_taken(), 2);
  for (auto& [name, parameter] : trainer.model().named_parameters()) {
    for (float v : parameter->data.to_floats()) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

}  // namespace observability_test
}  // namespace titan
