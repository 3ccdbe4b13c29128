// The enumerator against the trainer: for small models and device counts,
// every raw candidate (every degree tuple whose product is the device count,
// every schedule, a ladder of batch and micro-batch sizes) is set up by the
// trainer's own code on the rehearsal backend (comm.mode = fake_backend:
// validate, the device mesh, the micro-batch count, the step inputs and the
// job's model, for a few representative ranks), and the layouts it accepts
// must be exactly those enumerate_layouts proposes. The one refusal the
// trainer only makes at the first forward (sequence parallelism's split of
// the tokens) is confirmed by running a rehearsal step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "titan/comm/device_mesh.h"
#include "titan/comm/fake_process_group.h"
#include "titan/core/error.h"
#include "titan/models/model_spec.h"
#include "titan/parallel/pipeline_schedule.h"
#include "titan/plan/layout.h"
#include "titan/plan/layout_check.h"
#include "titan/train/config_loader.h"
#include "titan/train/job_model.h"
#include "titan/train/job_setup.h"
#include "titan/train/pipeline_plan.h"
#include "titan/train/random_batches.h"
#include "titan/train/step_inputs.h"
#include "titan/train/trainer.h"

namespace titan::plan {
namespace layout_enumeration_test {

using Clock = std::chrono::steady_clock;

struct EnumerationCase {
  std::string model, flavor;
  int64_t devices, devices_per_node, seq_len, global_sequences;  // 0 sequences: one per dp rank
  bool no_aux_loss = false;  // model.moe_aux_loss_coef = 0 (what pipeline parallelism of an MoE asks)
};

std::string case_name(const EnumerationCase& c) {
  return fmt::format("{} {} on {} devices ({} per node), seq {}, {} sequences{}", c.model, c.flavor, c.devices,
                     c.devices_per_node, c.seq_len, c.global_sequences, c.no_aux_loss ? ", no aux loss" : "");
}

PlanRequest request_of(const EnumerationCase& c) {
  PlanRequest request;
  request.model = c.model;
  request.flavor = c.flavor;
  request.devices = c.devices;
  request.devices_per_node = c.devices_per_node;
  request.seq_len = c.seq_len;
  request.global_batch_tokens = c.global_sequences * c.seq_len;
  request.activation_modes = {"none"};
  request.max_pipeline_degree = c.devices;
  return request;
}

train::JobConfig job_of(const EnumerationCase& c, const Layout& layout, const PlanRequest& request) {
  train::JobConfig job;
  apply_layout(layout, request, job);
  job.training.global_batch_size = c.global_sequences > 0 ? c.global_sequences : layout.dp();
  job.model.vocab_size = models::model_config(c.model, c.flavor).vocab_size;
  // The flavor as it is unless the case says otherwise (apply_layout zeroes the
  // auxiliary loss of a pipelined MoE, which the enumerator only proposes when
  // given a config without one).
  job.model.moe_aux_loss_coef = c.no_aux_loss ? 0.0 : -1.0;
  job.training.memory_check = false;  // fitting in memory is the cost model's question, not the validator's
  job.training.steps = 1;
  job.training.seed = 3;
  job.comm.mode = "fake_backend";
  job.comm.fake_world_size = c.devices;
  return job;
}

// The model config the enumerator is given: the trainer's own resolution of the job's keys.
models::DecoderConfig model_config_of(const EnumerationCase& c) {
  models::DecoderConfig config = models::model_config(c.model, c.flavor);
  if (c.no_aux_loss) {
    for (nn::TransformerBlockConfig& layer : config.layers) {
      if (layer.moe) layer.moe->aux_loss_coef = 0.0;
    }
  }
  return config;
}

// Every ordered way of writing n as a product of `count` factors.
void factorizations(int64_t n, size_t count, std::vector<int64_t>& prefix, std::vector<std::vector<int64_t>>& out) {
  if (prefix.size() + 1 == count) {
    prefix.push_back(n);
    out.push_back(prefix);
    prefix.pop_back();
    return;
  }
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d != 0) continue;
    prefix.push_back(d);
    factorizations(n / d, count, prefix, out);
    prefix.pop_back();
  }
}

// A ladder of sizes up to `limit`: the powers of two and `extra` (when > 0).
// Sizes that do not divide are kept: the trainer must refuse them.
std::vector<int64_t> size_ladder(int64_t limit, int64_t extra) {
  std::set<int64_t> sizes;
  for (int64_t size = 1; size <= limit; size *= 2) sizes.insert(size);
  if (extra > 0) sizes.insert(extra);
  return {sizes.begin(), sizes.end()};
}

// The raw candidates of a case: a superset of what the enumerator searches.
std::vector<Layout> raw_candidates(const EnumerationCase& c) {
  std::vector<std::vector<int64_t>> tuples;
  std::vector<int64_t> prefix;
  factorizations(c.devices, 5, prefix, tuples);  // pp, dp_replicate, dp_shard, cp, tp
  const models::DecoderConfig config = model_config_of(c);
  const bool moe = std::any_of(config.layers.begin(), config.layers.end(), [](const auto& l) { return l.moe; });
  std::vector<Layout> candidates;
  for (const std::vector<int64_t>& t : tuples) {
    Layout base;
    base.pp = t[0];
    base.dp_replicate = t[1];
    base.dp_shard = t[2];
    base.cp = t[3];
    base.tp = t[4];
    const int64_t dp = base.dp();
    const int64_t global = c.global_sequences > 0 ? c.global_sequences : dp;
    // Every divisor of the devices for an MoE (the trainer refuses those not
    // dividing dp_shard or the experts); 1 and 2 for a dense model.
    std::vector<int64_t> eps;
    for (int64_t ep = 1; ep <= c.devices; ++ep) {
      if (c.devices % ep == 0 && (moe || ep <= 2)) eps.push_back(ep);
    }
    for (int64_t ep : eps) {
      base.ep = ep;
      for (int64_t local : size_ladder(global, global % dp == 0 ? global / dp : 0)) {
        Layout layout = base;
        layout.local_batch_size = local;
        // A local batch that does not divide the global one gets the requested
        // global batch all the same (job_of): the trainer must refuse it.
        layout.gradient_accumulation = global % (local * dp) == 0 ? global / (local * dp) : 1;
        if (layout.pp == 1) {
          layout.microbatch_size = local;
          candidates.push_back(layout);
          continue;
        }
        for (const std::string& schedule : parallel::pipeline::schedule_names()) {
          layout.pipeline_schedule = schedule;
          layout.stages_per_rank = parallel::pipeline::stages_per_rank(schedule);
          for (int64_t microbatch : size_ladder(local, local)) {
            layout.microbatch_size = microbatch;
            candidates.push_back(layout);
          }
        }
      }
    }
  }
  return candidates;
}

std::string key_of(const Layout& l) {
  return fmt::format("pp{} dpr{} dps{} cp{} tp{} ep{} {} mb{} local{} accum{}", l.pp, l.dp_replicate, l.dp_shard, l.cp,
                     l.tp, l.ep, l.pipeline_schedule.empty() ? "-" : l.pipeline_schedule, l.microbatch_size,
                     l.local_batch_size, l.gradient_accumulation);
}

// The ranks set up for a layout: the first, the last, and the first of a middle pipeline stage.
std::vector<int> ranks_of(const Layout& layout) {
  const int64_t n = layout.devices();
  std::set<int64_t> ranks{0, n - 1};
  if (layout.pp > 2) ranks.insert((layout.pp / 2) * (n / layout.pp));
  return {ranks.begin(), ranks.end()};
}

// The job's model is built on the meta device: the same plan, cuts and
// checks as on the CPU (the two agreed on every dense case when this test was
// written), without drawing millions of initial values per candidate.
Device setup_device() { return Device::meta(); }

// The trainer's set-up of `layout` (train/trainer.cpp's constructor, in its
// order): the first refusal's message, or empty when every rank sets up.
std::string trainer_setup_refusal(const EnumerationCase& c, const Layout& layout, const PlanRequest& request) {
  train::JobConfig job = job_of(c, layout, request);
  try {
    train::validate(job);
    // The real job's mesh over its nodes (filled in order), as build_device_mesh
    // builds it for a launched job: a rehearsal knows no nodes, so the
    // tensor-parallel-within-a-node check is run here on a mesh of its own.
    std::vector<int> node_of_rank(static_cast<size_t>(c.devices));
    for (int64_t r = 0; r < c.devices; ++r)
      node_of_rank[static_cast<size_t>(r)] = static_cast<int>(r / c.devices_per_node);
    const train::ParallelismSection& p = job.parallelism;
    const comm::ParallelDims dims{p.pipeline_parallel_degree,   p.data_parallel_replicate_degree,
                                  p.data_parallel_shard_degree, p.context_parallel_degree,
                                  p.tensor_parallel_degree,     p.expert_parallel_degree};
    comm::DeviceMesh nodes_mesh(dims.resolved_on_nodes(node_of_rank),
                                std::make_shared<comm::FakeProcessGroup>(0, static_cast<int>(c.devices)), node_of_rank);
    for (int rank : ranks_of(layout)) {
      job.comm.fake_rank = rank;
      const std::unique_ptr<comm::DeviceMesh> mesh = train::build_device_mesh(job, Device::cpu());
      const int64_t micro_batches = train::micro_batches_per_step(job, *mesh);
      const int64_t pipeline_micro_batches = mesh->size(comm::MeshDim::pp) > 1 ? train::pipeline_microbatches(job) : 1;
      train::StepInputsBuilder inputs(job, *mesh, Device::cpu(), micro_batches, pipeline_micro_batches);
      Generator generator(0);
      train::JobModel model = train::build_job_model(job, *mesh, setup_device(), 0, generator);
    }
  } catch (const Error& error) {
    return error.what();
  }
  return {};
}

// One rehearsal step of rank 0 and the last rank (the trainer whole, forward and backward included).
std::string trainer_step_refusal(const EnumerationCase& c, const Layout& layout, const PlanRequest& request) {
  // One folder per process: CTest may run this binary's tests side by side.
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / fmt::format("titan_layout_enumeration_{}", ::getpid());
  std::filesystem::remove_all(folder);
  train::JobConfig job = job_of(c, layout, request);
  job.job.dump_folder = folder.string();
  job.metrics.progress = false;
  job.metrics.peak_tflops = 1.0;  // no peak measurement: only whether the step runs matters
  try {
    for (int rank : {0, static_cast<int>(c.devices - 1)}) {
      job.comm.fake_rank = rank;
      train::Trainer trainer(job,
                             train::random_token_batches(layout.local_batch_size, c.seq_len, job.model.vocab_size, 5));
      trainer.train();
    }
  } catch (const Error& error) {
    std::filesystem::remove_all(folder);
    return error.what();
  }
  std::filesystem::remove_all(folder);
  return {};
}

// The enumerator's search space (layout.h): under pipelining, the whole
// per-rank batch in one pass (no accumulation), and micro-batches of more than
// one sequence only while there are at least as many as pipeline ranks. The
// trainer accepts more; the property is about this space.
bool in_search_space(const EnumerationCase& c, const Layout& layout) {
  if (layout.pp == 1) return true;
  const int64_t global = c.global_sequences > 0 ? c.global_sequences : layout.dp();
  if (layout.local_batch_size * layout.dp() != global) return false;
  return layout.microbatch_size == 1 || layout.local_batch_size / layout.microbatch_size >= layout.pp;
}

struct Comparison {
  size_t candidates = 0, accepted = 0, proposed = 0, steps = 0;
  std::vector<std::string> missed, wrongly_proposed;
};

Comparison compare_with_trainer(const EnumerationCase& c) {
  const PlanRequest request = request_of(c);
  const models::DecoderConfig config = model_config_of(c);
  Comparison result;
  std::map<std::string, std::string> proposed;  // key -> describe()
  for (const Layout& layout : enumerate_layouts(request, config)) proposed[key_of(layout)] = layout.describe();
  result.proposed = proposed.size();
  std::set<std::string> accepted;
  for (const Layout& candidate : raw_candidates(c)) {
    const std::string key = key_of(candidate);
    const bool is_proposed = proposed.count(key) > 0;
    if (!is_proposed && !in_search_space(c, candidate)) continue;  // neither side of the property
    ++result.candidates;
    std::string refusal = trainer_setup_refusal(c, candidate, request);
    // The refusal the set-up cannot make (sequence parallelism splits the
    // tokens at the first forward): asked of a rehearsal step, and of one
    // accepted layout with tensor parallelism as a control.
    const bool sequence_split = candidate.tp > 1 && (c.seq_len / candidate.cp) % candidate.tp != 0;
    if (refusal.empty() && (sequence_split || (candidate.tp > 1 && result.steps == 0))) {
      ++result.steps;
      refusal = trainer_step_refusal(c, candidate, request);
    }
    if (refusal.empty()) {
      accepted.insert(key);
      if (!is_proposed) {
        result.missed.push_back(fmt::format("{} (the rules say: {})", key, layout_refusal(candidate, request, config)));
      }
    } else if (is_proposed) {
      result.wrongly_proposed.push_back(fmt::format("{}: the trainer says: {}", key, refusal));
    }
  }
  result.accepted = accepted.size();
  // Proposed layouts outside the raw grid would go unchecked: there must be none.
  for (const auto& [key, text] : proposed) {
    if (!accepted.count(key) &&
        std::find_if(result.wrongly_proposed.begin(), result.wrongly_proposed.end(),
                     [&](const std::string& w) { return w.starts_with(key + ":"); }) == result.wrongly_proposed.end()) {
      result.wrongly_proposed.push_back(fmt::format("{} ({}) is not among the raw candidates", key, text));
    }
  }
  return result;
}

void expect_enumeration_matches_trainer(const std::vector<EnumerationCase>& cases) {
  for (const EnumerationCase& c : cases) {
    const auto start = Clock::now();
    const Comparison result = compare_with_trainer(c);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("%s: %zu candidates, the trainer accepts %zu, the planner proposes %zu (%zu rehearsal steps), %.1f s\n",
                case_name(c).c_str(), result.candidates, result.accepted, result.proposed, result.steps, seconds);
    EXPECT_GT(result.accepted, 0u) << case_name(c);
    for (const std::string& missed : result.missed) ADD_FAILURE() << case_name(c) << ": missed " << missed;
    for (const std::string& wrong : result.wrongly_proposed) {
      ADD_FAILURE() << case_name(c) << ": proposed but refused: " << wrong;
    }
  }
}

TEST(LayoutEnumeration, DenseLlamaMatchesTheTrainer) {
  // seq 36: CP 4 and 8 do not cut it into 2 x cp chunks, and TP 8 (or TP 4
  // under CP 2) does not split it; 6 and 8 devices over nodes of 4 refuse TP
  // across nodes; 6 layers refuse 12 or 16 stages; 16 sequences over PP 3 give
  // Interleaved1F1B micro-batch counts it refuses.
  expect_enumeration_matches_trainer({
      {"llama3", "debugmodel", 1, 8, 36, 4},
      {"llama3", "debugmodel", 2, 8, 36, 0},
      {"llama3", "debugmodel", 3, 8, 36, 12},
      {"llama3", "debugmodel", 4, 8, 36, 8},
      {"llama3", "debugmodel", 6, 4, 36, 16},
      {"llama3", "debugmodel", 8, 8, 36, 0},
      {"llama3", "debugmodel", 8, 4, 36, 8},
  });
}

TEST(LayoutEnumeration, TiedAndMixtureOfExpertsModelsMatchTheTrainer) {
  // qwen3's debugmodel ties its output to the embeddings (only the V schedule
  // pipelines it) and has 8 query / 4 key-value heads; qwen3_moe's has 8
  // experts, a dense first layer and an auxiliary loss (no pipelining unless
  // it is 0).
  expect_enumeration_matches_trainer({
      {"qwen3", "debugmodel", 4, 4, 32, 4},
      {"qwen3", "debugmodel", 8, 4, 32, 0},
      {"qwen3_moe", "debugmodel", 4, 8, 32, 4},
      {"qwen3_moe", "debugmodel", 8, 8, 32, 0, true},
  });
}

TEST(LayoutEnumeration, EveryActivationCheckpointingModeSetsUp) {
  // The modes do not change which degrees are accepted: each proposed for a
  // few layouts of every kind must set up as "none" does.
  const EnumerationCase c{"qwen3_moe", "debugmodel", 4, 4, 32, 4, true};
  PlanRequest request = request_of(c);
  request.activation_modes = {"selective", "full"};
  std::set<std::string> kinds;
  size_t checked = 0;
  for (const Layout& layout : enumerate_layouts(request, model_config_of(c))) {
    const std::string kind = fmt::format("{}{}{}{}{}", layout.pp > 1, layout.tp > 1, layout.cp > 1, layout.ep > 1,
                                         layout.activation_checkpoint);
    if (!kinds.insert(kind).second) continue;
    ++checked;
    EXPECT_EQ(trainer_setup_refusal(c, layout, request), "") << layout.describe();
  }
  EXPECT_GE(checked, 8u);
}

TEST(LayoutEnumeration, EmittedJobTomlLoadsAndValidates) {
  const EnumerationCase c{"llama3", "debugmodel", 8, 8, 64, 16};
  const PlanRequest request = request_of(c);
  const std::vector<Layout> layouts = enumerate_layouts(request, model_config_of(c));
  ASSERT_FALSE(layouts.empty());
  const Layout& layout = layouts[layouts.size() / 2];
  train::JobConfig job;
  train::load_toml_string(job, layout_job_toml(layout, request), "layout_job_toml");
  EXPECT_NO_THROW(train::validate(job));
  EXPECT_EQ(job.parallelism.pipeline_parallel_degree * job.parallelism.data_parallel_replicate_degree *
                job.parallelism.data_parallel_shard_degree * job.parallelism.context_parallel_degree *
                job.parallelism.tensor_parallel_degree,
            8);
  EXPECT_EQ(job.training.global_batch_size, 16);
  EXPECT_EQ(job.training.seq_len, 64);
  EXPECT_EQ(job.model.vocab_size, models::model_config("llama3", "debugmodel").vocab_size);
}

TEST(LayoutEnumeration, LargeClustersEnumerateQuickly) {
  // Llama 3 405B on 1,024 devices (nodes of 8, 16M-token batches) and
  // Qwen3-235B-A22B on 256: well under a second, a bounded count, and the
  // layouts the published runs used among them (TorchTitan's 405B: FSDP x TP 8 x PP).
  struct Large {
    std::string model, flavor;
    int64_t devices, seq_len, global_tokens;
  };
  for (const Large& large : {Large{"llama3", "405B", 1024, 8192, 16 * 1024 * 1024},
                             Large{"qwen3_moe", "235B-A22B", 256, 4096, 4 * 1024 * 1024}}) {
    PlanRequest request;
    request.model = large.model;
    request.flavor = large.flavor;
    request.devices = large.devices;
    request.devices_per_node = 8;
    request.seq_len = large.seq_len;
    request.global_batch_tokens = large.global_tokens;
    const models::DecoderConfig config = models::model_config(large.model, large.flavor);
    const auto start = Clock::now();
    const std::vector<Layout> layouts = enumerate_layouts(request, config);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("%s %s on %lld devices: %zu layouts in %.3f s\n", large.model.c_str(), large.flavor.c_str(),
                static_cast<long long>(large.devices), layouts.size(), seconds);
    EXPECT_LT(seconds, 1.0);
    EXPECT_GT(layouts.size(), 0u);
    EXPECT_LT(layouts.size(), 100000u);
    for (const Layout& layout : layouts) {
      ASSERT_EQ(layout.devices(), large.devices) << layout.describe();
      ASSERT_EQ(layout_refusal(layout, request, config), "") << layout.describe();
    }
    const auto has = [&](const std::function<bool(const Layout&)>& match) {
      return std::any_of(layouts.begin(), layouts.end(), match);
    };
    if (large.model == "llama3") {
      // TorchTitan's published 405B layout (FSDP 8 x TP 8 x PP 8 on 512 H100s), FSDP doubled for 1,024.
      EXPECT_TRUE(has([](const Layout& l) {
        return l.dp_shard == 16 && l.tp == 8 && l.pp == 8 && l.pipeline_schedule == "Interleaved1F1B";
      }));
      EXPECT_FALSE(has([](const Layout& l) { return l.tp > 8 || l.ep > 1; }));  // 8 KV heads, a node of 8; dense
    } else {
      // 4 KV heads bound TP; 128 experts take EP up to 128; the auxiliary loss rules out PP.
      EXPECT_TRUE(has([](const Layout& l) { return l.ep == 64 && l.dp_shard == 256; }));
      EXPECT_FALSE(has([](const Layout& l) { return l.tp > 4 || l.pp > 1; }));
    }
  }
}

}  // namespace layout_enumeration_test
}  // namespace titan::plan
