#include "titan/train/step_profiler.h"

#include <cstdio>
#include <filesystem>

#include "titan/core/error.h"
#include "titan/core/memory_recorder.h"
#include "titan/core/memory_snapshot_writer.h"
#include "titan/core/profiler.h"
#include "titan/train/profile_trace.h"

namespace titan::train {
namespace {
// Allocation events kept between snapshots (the newest; older ones are counted as dropped).
constexpr size_t kMemoryEvents = 1'000'000;
}  // namespace

StepProfiler::StepProfiler(const JobConfig& config, int rank)
    : enabled_(config.profiling.enable_profiling),
      memory_(config.profiling.enable_memory_snapshot),
      freq_(config.profiling.profile_freq),
      traces_folder_((std::filesystem::path(config.job.dump_folder) / config.profiling.save_traces_folder).string()),
      memory_folder_(
          (std::filesystem::path(config.job.dump_folder) / config.profiling.save_memory_snapshot_folder).string()),
      rank_(rank) {
  TITAN_CHECK(!enabled_ || TITAN_PROFILER,
              "profiling.enable_profiling: this titan was built with -DTITAN_PROFILER=OFF (no profiler in it)");
  profiler::set_thread_name("training");
  // Always: a failed allocation leaves at least the request and the allocator's counters (and, recording, the history).
  memory::set_out_of_memory_dump(memory_folder_, fmt::format("rank{}", rank_));
  if (memory_) memory::start(kMemoryEvents);
}

StepProfiler::~StepProfiler() {
  memory::set_out_of_memory_dump("", "");
  if (memory_) memory::stop();
}

bool StepProfiler::profiles(int64_t step) const { return (enabled_ || memory_) && step % freq_ == 0; }

void StepProfiler::begin_step(int64_t step) {
  if (!profiles(step)) return;
  training_thread_ = profiler::thread_index();
  // The snapshot shows this step alone (an out-of-memory dump, whatever was recorded since the last one).
  if (memory_) memory::start(kMemoryEvents);
  if (enabled_) profiler::start();
  begin_us_ = profiler::now_us();
  active_ = true;
}

void StepProfiler::end_step(int64_t step) {
  if (!active_) return;
  active_ = false;
  if (memory_) {
    memory::stop();
    const std::filesystem::path folder = std::filesystem::path(memory_folder_) / fmt::format("iteration_{}", step);
    const std::string stem = fmt::format("rank{}_memory_snapshot", rank_);
    memory::write_memory_snapshot(memory::take(), folder.string(), stem);
    last_memory_snapshot_ = (folder / stem).string();
    memory::start(kMemoryEvents);
  }
  if (!enabled_) return;
  profiler::Event whole{fmt::format("step {}", step), "step", begin_us_, profiler::now_us() - begin_us_,
                        training_thread_};
  const double step_seconds = whole.duration_us * 1e-6;
  profiler::record(std::move(whole));
  for (const DeviceType type : {DeviceType::cuda}) {
    if (profiler::DeviceTimer* timer = profiler::device_timer(type)) {
      for (profiler::Event& kernel : timer->collect()) profiler::record(std::move(kernel));
    }
  }
  const std::vector<profiler::Event> events = profiler::stop();
  last_trace_ = (std::filesystem::path(traces_folder_) / fmt::format("iteration_{}", step) /
                 fmt::format("rank{}_trace.json", rank_))
                    .string();
  write_chrome_trace(last_trace_, events, profiler::thread_names(), rank_, step);
  if (rank_ != 0) return;
  const StepProfileSummary summary = summarize_step(events, training_thread_, step_seconds);
  std::printf("%s", format_summary(summary, step, rank_).c_str());
  std::fflush(stdout);
}

}  // namespace titan::train
