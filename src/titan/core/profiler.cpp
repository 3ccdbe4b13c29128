#include "titan/core/profiler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <mutex>

namespace titan::profiler {
namespace detail {
std::atomic<bool> active{false};
}  // namespace detail

namespace {

struct Recording {
  std::mutex mutex;
  std::vector<Event> events;
  std::vector<std::pair<int, std::string>> thread_names;
};

Recording& recording() {
  static Recording* r = new Recording();  // never destroyed: threads may record during static destruction
  return *r;
}

std::atomic<int> next_thread{0};
thread_local int this_thread = -1;
thread_local double noted_flops = -1.0;

}  // namespace

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void start() {
  Recording& r = recording();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.events.clear();
  }
  detail::active.store(true);
}

std::vector<Event> stop() {
  detail::active.store(false);
  Recording& r = recording();
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    events.swap(r.events);
  }
  // Outer spans first where two start together, so a reader can nest by order.
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.start_us != b.start_us) return a.start_us < b.start_us;
    return a.duration_us > b.duration_us;
  });
  return events;
}

int thread_index() {
  if (this_thread < 0) this_thread = next_thread.fetch_add(1);
  return this_thread;
}

void set_thread_name(const std::string& name) { set_track_name(thread_index(), name); }

void set_track_name(int index, const std::string& name) {
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& [thread, named] : r.thread_names) {
    if (thread == index) {
      named = name;
      return;
    }
  }
  r.thread_names.emplace_back(index, name);
}

std::vector<std::pair<int, std::string>> thread_names() {
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.thread_names;
}

void record(Event event) {
  Recording& r = recording();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.events.push_back(std::move(event));
}

namespace {
std::array<DeviceTimer*, kNumDeviceTypes> device_timers{};
}  // namespace

void register_device_timer(DeviceType type, DeviceTimer* timer) { device_timers[static_cast<size_t>(type)] = timer; }

DeviceTimer* device_timer(DeviceType type) { return device_timers[static_cast<size_t>(type)]; }

void note_flops(double flops) {
  if (active()) noted_flops = flops;
}

double take_noted_flops() {
  const double flops = noted_flops;
  noted_flops = -1.0;
  return flops;
}

Span::Span(const char* category, std::string_view name) {
  if (!active()) return;
  recording_ = true;
  event_.category = category;
  event_.name = name;
  event_.thread = thread_index();
  event_.start_us = now_us();
}

Span::~Span() {
  if (!recording_) return;
  event_.duration_us = now_us() - event_.start_us;
  // A span still open when recording stopped belongs to no trace.
  if (active()) record(std::move(event_));
}

}  // namespace titan::profiler
