// The profiler: while active, spans of work (ops, backward nodes, module
// forwards, collectives, the trainer's phases) are recorded per thread with
// their arguments, and written as a Chrome trace-event file (Perfetto,
// chrome://tracing). Built with TITAN_PROFILER=OFF it does not exist:
// active() is a constant false and every hook compiles away, which is what
// the overhead benchmark compares against.
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include <string_view>
#include <vector>
#include "titan/core/device.h"

namespace titan::profiler {

#if TITAN_PROFILER
namespace detail {
extern std::atomic<bool> active;
}
inline bool active() { return detail::active.load(std::memory_order_relaxed); }
#else
constexpr bool active() { return false; }
#endif

// Microseconds on the steady clock (the trace's time axis).
double now_us();

// One span ("X" event) or, with duration < 0, an instant.
struct Event {
  std::string name;
  std::string category;  // op, backward, module, comm, wait, phase
  double start_us = 0.0;
  double duration_us = 0.0;
  int thread = 0;  // this process's thread index (see thread_index())
  nlohmann::json args = nlohmann::json::object();
};

// Starts recording (clearing what an earlier session left) / stops and returns the events, by start time.
void start();
std::vector<Event> stop();

// A small number per thread, in order of first use, and the track name shown for it.
int thread_index();
void set_thread_name(const std::string& name);
// A track that is not a host thread (a device stream), numbered from kDeviceTracks.
inline constexpr int kDeviceTracks = 1000;
void set_track_name(int track, const std::string& name);
std::vector<std::pair<int, std::string>> thread_names();

void record(Event event);

// The next op dispatched on this thread did `flops` floating-point operations
// (set by the ops that know their formula: GEMMs, attention, the fused loss).
void note_flops(double flops);
// Takes (and clears) what note_flops left; < 0 when nothing was noted.
double take_noted_flops();

// Devices that run ops asynchronously (CUDA) time each op's kernels on the
// device itself: the host span of such an op only covers its launch. The
// backend registers a timer; op spans mark the device stream around the
// launch, and the step's end collects the marks as "kernel" events on the
// device's own track, placed on the host's time axis.
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  // Marks the stream before and after op `name`'s launches; begin returns a handle for end.
  virtual int64_t begin(const char* name) = 0;
  virtual void end(int64_t handle) = 0;
  // Waits for the marked work, returns its events (and forgets them).
  virtual std::vector<Event> collect() = 0;
};
void register_device_timer(DeviceType type, DeviceTimer* timer);
DeviceTimer* device_timer(DeviceType type);

// Records [construction, destruction) as one span when the profiler is active at construction.
class Span {
 public:
  // `name` is copied only when recording.
  Span(const char* category, std::string_view name);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  bool recording() const { return recording_; }
  // Arguments shown with the span (only when recording()).
  nlohmann::json& args() { return event_.args; }

 private:
  bool recording_ = false;
  Event event_;
};

}  // namespace titan::profiler
