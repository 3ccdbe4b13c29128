// The memory recorder: while on, every tensor allocation and free (from
// Storage, so on every device) becomes an event naming the op and the module
// that caused it, and the blocks alive are tracked, so a snapshot can say what
// was alive at the peak and who allocated it. Off, it costs one relaxed atomic
// load per allocation.
//
// Sizes are the bytes tensors asked for, not what the allocator rounded them
// to (the caching allocator's own statistics count rounded blocks).
//
// A snapshot is written as JSON and a self-contained HTML page by
// write_memory_snapshot (memory_snapshot_writer.h). When an allocation fails
// and set_out_of_memory_dump() named a folder, one is written there before
// the error propagates.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "titan/core/allocator.h"
#include "titan/core/device.h"

namespace titan::memory {

enum class Action : uint8_t {
  alloc,
  free,
  oom,  // an allocation that failed: bytes is the request, live bytes are unchanged
};
const char* action_name(Action action);

struct Event {
  int64_t time_us = 0;  // steady clock
  Action action = Action::alloc;
  Device device;
  uintptr_t address = 0;
  size_t bytes = 0;
  int64_t live_bytes = 0;  // on this device type, after the event
  std::string op;          // "" outside every op
  std::string module;      // "" outside every module
  int thread = 0;          // the OS thread id
};

// A block of memory alive at some moment, with where it came from.
struct Block {
  Device device;
  uintptr_t address = 0;
  size_t bytes = 0;
  int64_t time_us = 0;  // when it was allocated
  std::string op;
  std::string module;
  int thread = 0;
};

// One device type's curve over the recorded window.
struct DeviceTimeline {
  DeviceType device = DeviceType::cpu;
  // Live bytes when the window begins (at start(), or just before the oldest
  // kept event when the ring dropped some) and when the snapshot was taken.
  int64_t start_live_bytes = 0;
  int64_t live_bytes = 0;
  // The most live bytes in the window; when the curve never rises above its
  // start, the peak is the start (peak_event == -1).
  int64_t peak_bytes = 0;
  int64_t peak_time_us = 0;
  int64_t peak_event = -1;  // index into Snapshot::events
  // The recorded blocks alive at the peak, largest first, and the bytes alive
  // then that were allocated before recording began (no attribution known):
  // sum(peak_blocks) + peak_untracked_bytes == peak_bytes.
  std::vector<Block> peak_blocks;
  int64_t peak_untracked_bytes = 0;
};

// The allocation whose failure an out-of-memory snapshot reports.
struct FailedAllocation {
  int64_t time_us = 0;
  Device device;
  size_t bytes = 0;
  std::string op;
  std::string module;
  int thread = 0;
  std::string error;  // the allocator's message
};

struct Snapshot {
  bool recording = false;  // still recording when taken
  int64_t start_time_us = 0;
  int64_t end_time_us = 0;  // when taken (or when recording stopped)
  size_t max_events = 0;
  uint64_t dropped_events = 0;          // the oldest, beyond max_events
  std::vector<Event> events;            // oldest first
  std::vector<Block> live_blocks;       // recorded blocks alive at end_time_us, largest first
  std::vector<DeviceTimeline> devices;  // each device type that had events
  std::optional<FailedAllocation> failure;
  // The allocators' own counters at take() (device types that have one).
  std::vector<std::pair<DeviceType, MemoryStats>> allocator_stats;

  const DeviceTimeline* timeline(DeviceType type) const;
};

namespace detail {
extern std::atomic<bool> recording_flag;
}  // namespace detail

// Starts a new recording (dropping any previous one), keeping the newest
// max_events events (> 0).
void start(size_t max_events);
// Stops recording; what was recorded stays for take() until the next start().
void stop();
inline bool recording() { return detail::recording_flag.load(std::memory_order_relaxed); }
// The events, blocks and peaks recorded so far (during or after recording).
Snapshot take();

// Storage's hooks: called only when recording() (and only for non-null,
// non-meta blocks). They never throw (Storage frees in its destructor): an
// event that cannot be stored for want of memory counts as dropped.
void record_alloc(Device device, const void* ptr, size_t bytes) noexcept;
void record_free(Device device, const void* ptr, size_t bytes) noexcept;

// When folder is non-empty, an allocation that fails writes
// <folder>/<stem>_oom.json and .html (the snapshot plus the failed request).
// An empty folder turns it off.
void set_out_of_memory_dump(std::string folder, std::string stem);
// Storage's hook when an allocation throws: records an oom event when
// recording and writes the dump when a folder is set. Never throws (a failed
// dump is reported on stderr).
void on_allocation_failure(Device device, size_t bytes, const char* error) noexcept;

// Starts recording for its lifetime and stops at the end (tests, tools).
class RecordingScope {
 public:
  explicit RecordingScope(size_t max_events) { start(max_events); }
  ~RecordingScope() { stop(); }
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;
};

}  // namespace titan::memory
