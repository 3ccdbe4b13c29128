// `titan plan --model llama3 --flavor 405B --devices 1024 --device-type h100`:
// every layout titan accepts for the model on that many devices, those that
// fit in memory costed by the step-time model (plan/cost_model.h), the best
// few printed with what their step is made of (docs/planning.md).
// --emit-config writes the winner as a job TOML, --simulate its predicted
// timeline as Chrome traces, --rehearse runs its first rank on the rehearsal
// backend and sets the measured memory beside the prediction.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <thread>

#include "titan/cli/numeric_checks.h"
#include "titan/cli/subcommands.h"
#include "titan/core/error.h"
#include "titan/core/units.h"
#include "titan/plan/cost_model.h"
#include "titan/plan/layout.h"
#include "titan/plan/link_probe.h"
#include "titan/plan/simulated_trace.h"

namespace titan::cli {

namespace {

struct PlanArguments {
  plan::PlanRequest request;
  std::string device_type = "h100", dtype = "bf16", emit_config, simulate,
              rehearse_folder = "/tmp/titan_plan_rehearsal";
  int64_t devices_per_node = 0, top = 5, threads_per_rank = 0, rehearse_seq_len = 0;
  double inter_node_gbps = 0, intra_node_gbps = 0;
  bool probe_links = false, rehearse = false, measure_links = true;
};

std::string gib(double bytes) { return fmt::format("{:.1f}", bytes / kBytesPerGiB); }

plan::DeviceProfile device_for(const PlanArguments& args) {
  plan::DeviceProfile device;
  if (args.device_type == "cpu") {
    plan::CpuProbeOptions probe;
    probe.ranks_per_node = static_cast<int>(args.request.devices_per_node);
    probe.threads_per_rank = static_cast<int>(args.threads_per_rank);
    probe.measure_links = args.measure_links && args.request.devices > 1;
    probe.titan_executable = std::filesystem::read_symlink("/proc/self/exe").string();
    device = plan::measure_cpu_profile(probe);
  } else {
    device = plan::published_device_profile(args.device_type);
  }
  // --interconnect: the links a published profile assumes are the common ones; a cluster may differ.
  if (args.inter_node_gbps > 0) device.inter_node.bytes_per_second = args.inter_node_gbps * 1e9 / 8;
  if (args.intra_node_gbps > 0) device.intra_node.bytes_per_second = args.intra_node_gbps * 1e9 / 8;
  return device;
}

void print_prediction(size_t index, const plan::StepPrediction& p) {
  std::printf("%3zu  %-58s %8.3f %10.0f %5.1f%% %8s %8s\n", index, p.layout.describe().c_str(), p.step_seconds,
              p.tokens_per_second_per_device, 100.0 * p.mfu, gib(p.memory_bytes).c_str(),
              gib(p.memory_capacity_bytes * train::MemoryBudget::kUsableFraction - p.memory_bytes).c_str());
  std::printf("     %s\n", p.reasons().c_str());
}

// The rehearsal of the layout's first rank; its measured tensor peak against the prediction for the same job.
int rehearse(const PlanArguments& args, const plan::Layout& layout, const plan::ModelUnderPlan& model,
             const plan::DeviceProfile& device) {
  plan::PlanRequest request = args.request;
  if (args.rehearse_seq_len > 0) request.seq_len = args.rehearse_seq_len;
  std::filesystem::create_directories(args.rehearse_folder);
  const std::string config = (std::filesystem::path(args.rehearse_folder) / "job.toml").string();
  std::ofstream(config) << plan::layout_job_toml(layout, request);
  const std::string command = fmt::format(
      "'{}' train --config '{}' --comm.mode fake_backend --comm.fake_world_size {} --comm.fake_rank 0 "
      "--training.steps 2 --training.device cpu --validation.enable false --job.dump_folder '{}' 2>&1",
      std::filesystem::read_symlink("/proc/self/exe").string(), config, layout.devices(),
      (std::filesystem::path(args.rehearse_folder) / "dump").string());
  std::printf("\nrehearsal: %s\n", command.c_str());
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  TITAN_CHECK(pipe != nullptr, "titan plan --rehearse: cannot start '{}'", command);
  std::string output;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe.get()) != nullptr) output += buffer.data();
  const int status = pclose(pipe.release());
  std::smatch match;
  if (status != 0 || !std::regex_search(output, match, std::regex("peak memory ([0-9.]+) GiB in tensors"))) {
    std::printf("%s", output.c_str());
    std::printf("rehearsal: the job failed (exit status %d): no measurement\n", status);
    return 1;
  }
  const double measured = std::stod(match[1].str()) * kBytesPerGiB;
  plan::DeviceProfile cpu = device;
  cpu.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));  // the rehearsal ran on this host
  const double predicted = plan::predict_memory(model, request, layout, cpu).needed_bytes;
  std::printf("rehearsal: rank 0 measured %s GiB in tensors at its peak; predicted %s GiB (%+.1f%%)%s\n",
              gib(measured).c_str(), gib(predicted).c_str(), 100.0 * (predicted - measured) / measured,
              args.rehearse_seq_len > 0 ? fmt::format(" at seq_len {}", request.seq_len).c_str() : "");
  return 0;
}

}  // namespace

Subcommand make_plan_subcommand() {
  auto args = std::make_shared<PlanArguments>();
  Subcommand subcommand;
  subcommand.add = [args](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand(
        "plan", "choose a layout for N devices: every valid one costed for step time, MFU and memory");
    plan::PlanRequest& r = args->request;
    app->add_option("--model", r.model, "model family (llama3, qwen3, ...; TorchTitan's names too)")
        ->capture_default_str();
    app->add_option("--flavor", r.flavor, "flavor (8B, 70B, 405B, 235B-A22B, debugmodel, ...)")->capture_default_str();
    app->add_option("--vocab-size", r.vocab_size, "vocabulary size (0 = the flavor's)")->check(at_least(0));
    app->add_option("--devices", r.devices, "devices (ranks) in the job")->capture_default_str()->check(at_least(1));
    app->add_option("--device-type", args->device_type,
                    fmt::format("device profile ({}); cpu is measured on this machine",
                                fmt::join(plan::device_profile_names(), ", ")))
        ->capture_default_str();
    app->add_option("--devices-per-node", args->devices_per_node,
                    "devices per node (0 = the profile's: 8 for GPUs; cpu: --devices on this one machine)")
        ->check(at_least(0));
    app->add_option("--seq-len", r.seq_len, "sequence length")->capture_default_str()->check(at_least(1));
    app->add_option("--global-batch-tokens", r.global_batch_tokens,
                    "tokens per optimizer step (0 = one sequence per data-parallel rank)")
        ->check(at_least(0));
    app->add_option("--dtype", args->dtype, "compute dtype (bf16, f32)")->capture_default_str();
    app->add_option("--inter-node-gbps", args->inter_node_gbps,
                    "the network between nodes, Gb/s per device (the profile's otherwise; e.g. 400 for 400G RDMA)")
        ->check(CLI::NonNegativeNumber);
    app->add_option("--intra-node-gbps", args->intra_node_gbps, "the link within a node, Gb/s per device per direction")
        ->check(CLI::NonNegativeNumber);
    app->add_flag("--compile", r.compile, "cost as if compiled (fused elementwise kernels)");
    app->add_flag("--float8", r.float8, "cost the linear layers' GEMMs at the device's fp8 peak");
    app->add_option("--schedules", r.schedules, "pipeline schedules to try (default: all)")->delimiter(',');
    app->add_option("--activation-checkpoint", r.activation_modes, "modes to try: none, selective, full (default: all)")
        ->delimiter(',');
    app->add_option("--cp-rotate-method", r.cp_rotate_method, "context parallelism: allgather or alltoall")
        ->capture_default_str()
        ->check(CLI::IsMember({"allgather", "alltoall"}));
    app->add_option("--max-pipeline-degree", r.max_pipeline_degree, "deepest pipeline to try")
        ->capture_default_str()
        ->check(at_least(1));
    app->add_option("--top", args->top, "layouts to print")->capture_default_str()->check(at_least(1));
    app->add_option("--threads-per-rank", args->threads_per_rank, "cpu: OpenMP threads per rank (0: cores / ranks)")
        ->check(at_least(0));
    app->add_flag("!--no-link-probe", args->measure_links,
                  "cpu: take the MPI link figures from the profile's defaults instead of measuring them");
    app->add_option("--emit-config", args->emit_config, "write the best layout's job TOML here");
    app->add_option("--simulate", args->simulate,
                    "write the best layout's predicted step as Chrome traces (rank<r>_trace.json) into this folder");
    app->add_flag("--rehearse", args->rehearse,
                  "run the best layout's rank 0 on the rehearsal backend (comm.mode = fake_backend) and compare "
                  "its measured memory with the prediction");
    app->add_option("--rehearse-seq-len", args->rehearse_seq_len,
                    "--rehearse at this sequence length (the prediction is redone for it)")
        ->check(at_least(0));
    app->add_option("--rehearse-folder", args->rehearse_folder, "where --rehearse writes its job")
        ->capture_default_str();
    app->add_flag("--probe-links", args->probe_links,
                  "(under mpirun) measure the links between ranks and print them as JSON; the cpu profile runs it");
    return app;
  };
  subcommand.run = [args] {
    if (args->probe_links) return plan::run_link_probe();
    plan::PlanRequest& request = args->request;
    request.compute_dtype = parse_dtype(args->dtype);
    TITAN_CHECK(request.compute_dtype == DType::bf16 || request.compute_dtype == DType::f32,
                "titan plan: --dtype must be bf16 or f32, got '{}'", args->dtype);
    request.devices_per_node = args->devices_per_node > 0 ? args->devices_per_node
                               : args->device_type == "cpu"
                                   ? request.devices
                                   : plan::published_device_profile(args->device_type).devices_per_node;
    TITAN_CHECK(request.devices % request.devices_per_node == 0 || request.devices < request.devices_per_node,
                "titan plan: --devices {} is not a whole number of nodes of --devices-per-node {}", request.devices,
                request.devices_per_node);
    request.devices_per_node = std::min(request.devices_per_node, request.devices);
    const plan::DeviceProfile device = device_for(*args);
    const plan::ModelUnderPlan model = plan::model_under_plan(request);
    const std::vector<plan::Layout> layouts = plan::enumerate_layouts(request, model.config);
    TITAN_CHECK(!layouts.empty(), "titan plan: no layout of {} {} fits {} devices (seq_len {}, global batch {} tokens)",
                request.model, request.flavor, request.devices, request.seq_len, request.global_batch_tokens);
    // Every layout's time, then memory (the dearer half) in order of speed until --top of them fit.
    std::vector<plan::StepPrediction> costed;
    costed.reserve(layouts.size());
    for (const plan::Layout& layout : layouts)
      costed.push_back(plan::predict_step_time(model, request, layout, device));
    std::stable_sort(costed.begin(), costed.end(), [](const auto& a, const auto& b) {
      return a.tokens_per_second_per_device > b.tokens_per_second_per_device;
    });
    std::vector<plan::StepPrediction> fitting;
    size_t checked = 0, too_big = 0;
    // Memory grows with the batch a rank runs at once, all else equal: once
    // a layout does not fit, its larger-batch twins are known not to either.
    std::map<std::string, int64_t> smallest_too_big;
    for (plan::StepPrediction& prediction : costed) {
      if (fitting.size() >= static_cast<size_t>(args->top)) break;
      ++checked;
      const plan::Layout& l = prediction.layout;
      const std::string twins =
          fmt::format("{} {} {} {} {} {} {} {} {}", l.dp_shard, l.cp, l.tp, l.pp, l.ep, l.pipeline_schedule,
                      l.activation_checkpoint, l.gradient_accumulation > 1, l.pp > 1 ? l.local_batch_size : 0);
      const int64_t batch = l.pp > 1 ? l.microbatch_size : l.local_batch_size;
      const auto known = smallest_too_big.find(twins);
      if (known != smallest_too_big.end() && known->second <= batch) {
        ++too_big;
        continue;
      }
      plan::add_memory(prediction, model, request, device);
      if (prediction.fits) {
        fitting.push_back(prediction);
        continue;
      }
      ++too_big;
      smallest_too_big[twins] = known == smallest_too_big.end() ? batch : std::min(known->second, batch);
    }
    const int64_t nodes = (request.devices + request.devices_per_node - 1) / request.devices_per_node;
    std::printf("titan plan: %s %s on %lld x %s (%lld per node, %lld node%s), seq %lld, %s\n", model.family.c_str(),
                request.flavor.c_str(), static_cast<long long>(request.devices), device.name.c_str(),
                static_cast<long long>(request.devices_per_node), static_cast<long long>(nodes), nodes == 1 ? "" : "s",
                static_cast<long long>(request.seq_len), args->dtype.c_str());
    std::printf(
        "  %zu layouts enumerated and costed; the %zu fastest checked for memory, %zu of them over %s GiB x %.2f\n",
        layouts.size(), checked, too_big, gib(device.memory_bytes).c_str(), train::MemoryBudget::kUsableFraction);
    if (fitting.empty()) {
      std::printf("  nothing fits: more devices, a shorter sequence or a smaller batch\n");
      return 1;
    }
    std::printf("\n%3s  %-58s %8s %10s %6s %8s %8s\n", "#", "layout", "step s", "tok/s/dev", "MFU", "mem GiB", "spare");
    for (size_t i = 0; i < fitting.size() && i < static_cast<size_t>(args->top); ++i)
      print_prediction(i + 1, fitting[i]);
    const plan::StepPrediction& best = fitting.front();
    if (!args->emit_config.empty()) {
      std::ofstream out(args->emit_config);
      out << plan::layout_job_toml(best.layout, request);
      TITAN_CHECK(out.good(), "titan plan: cannot write --emit-config '{}'", args->emit_config);
      std::printf("\nwrote the best layout's job to %s (titan train --config %s)\n", args->emit_config.c_str(),
                  args->emit_config.c_str());
    }
    if (!args->simulate.empty()) {
      std::vector<plan::TimelineEvent> timeline;
      plan::predict_step(model, request, best.layout, device, &timeline);
      const std::vector<std::string> files = plan::write_simulated_traces(args->simulate, timeline, best.layout);
      std::printf("\nwrote the predicted step's timeline: %s\n", fmt::format("{}", fmt::join(files, ", ")).c_str());
    }
    if (args->rehearse) return rehearse(*args, best.layout, model, device);
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
