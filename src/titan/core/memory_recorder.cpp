#include "titan/core/memory_recorder.h"

#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "titan/core/error.h"
#include "titan/core/memory_snapshot_writer.h"
#include "titan/core/trace_context.h"

namespace titan::memory {

namespace detail {
std::atomic<bool> recording_flag{false};
}  // namespace detail

namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int this_thread_id() {
  static thread_local const int id = static_cast<int>(syscall(SYS_gettid));
  return id;
}

// What the recorder knows about a block it saw allocated.
struct Origin {
  int64_t time_us = 0;
  uint32_t op = 0;  // indices into Recorder::names
  uint32_t module = 0;
  int thread = 0;
};

struct LiveBlock {
  Device device;
  size_t bytes = 0;
  Origin origin;
};

// Events are kept compact (names interned) since a recording may hold
// millions; Snapshot spells them out.
struct RawEvent {
  int64_t time_us = 0;
  Action action = Action::alloc;
  Device device;
  uintptr_t address = 0;
  size_t bytes = 0;
  int64_t live_bytes = 0;
  uint32_t op = 0;
  uint32_t module = 0;
  int thread = 0;
  // For a free: where the freed block came from, so the blocks alive at the
  // peak can be rebuilt by undoing the events after it.
  bool origin_known = false;
  Origin origin;
};

struct BlockKey {
  DeviceType type;
  uintptr_t address;
  bool operator==(const BlockKey&) const = default;
};

struct BlockKeyHash {
  size_t operator()(const BlockKey& key) const {
    return std::hash<uintptr_t>()(key.address) ^ (static_cast<size_t>(key.type) << 1);
  }
};

struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view name) const { return std::hash<std::string_view>()(name); }
};

struct Recorder {
  std::mutex mutex;
  size_t max_events = 0;
  std::vector<RawEvent> ring;
  size_t head = 0;  // the oldest event once the ring is full
  uint64_t dropped = 0;
  int64_t start_time_us = 0;
  int64_t stop_time_us = 0;
  std::array<int64_t, kNumDeviceTypes> live{};
  std::unordered_map<BlockKey, LiveBlock, BlockKeyHash> blocks;
  std::vector<std::string> names{""};  // index 0: outside every op / module
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> name_index{{"", 0}};

  std::mutex oom_mutex;
  std::string oom_folder;
  std::string oom_stem;

  // Interned by content: a module's name string may die with the module, and
  // a later one may reuse its address.
  uint32_t intern(std::string_view name) {
    if (name.empty()) return 0;
    const auto found = name_index.find(name);
    if (found != name_index.end()) return found->second;
    const auto index = static_cast<uint32_t>(names.size());
    names.emplace_back(name);
    name_index.emplace(names.back(), index);
    return index;
  }

  Origin origin_here(int64_t time_us) {
    Origin origin;
    origin.time_us = time_us;
    if (const char* op = trace::current_op()) origin.op = intern(op);
    if (const std::string* module = trace::current_module()) origin.module = intern(*module);
    origin.thread = this_thread_id();
    return origin;
  }

  void push(const RawEvent& event) {
    if (ring.size() < max_events) {
      ring.push_back(event);
      return;
    }
    ring[head] = event;
    head = (head + 1) % max_events;
    ++dropped;
  }

  // The kept events, oldest first.
  template <typename Fn>
  void for_each_event(Fn&& fn) const {
    for (size_t i = 0; i < ring.size(); ++i) fn(ring[(head + i) % ring.size()]);
  }

  Block block_of(BlockKey key, const LiveBlock& live) const {
    Block block;
    block.device = live.device;
    block.address = key.address;
    block.bytes = live.bytes;
    block.time_us = live.origin.time_us;
    block.op = names[live.origin.op];
    block.module = names[live.origin.module];
    block.thread = live.origin.thread;
    return block;
  }
};

// Never destroyed: tensors freed during static destruction still call the hooks.
Recorder& recorder() {
  static Recorder* const instance = new Recorder;
  return *instance;
}

std::atomic<bool> oom_dump_enabled{false};

int64_t live_delta(Action action, size_t bytes) {
  switch (action) {
    case Action::alloc:
      return static_cast<int64_t>(bytes);
    case Action::free:
      return -static_cast<int64_t>(bytes);
    case Action::oom:
      return 0;
  }
  return 0;
}

void sort_largest_first(std::vector<Block>& blocks) {
  std::sort(blocks.begin(), blocks.end(), [](const Block& a, const Block& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return a.time_us < b.time_us;
  });
}

// The device's peak over the kept events, and the blocks alive then: start
// from the blocks alive now and undo, newest first, every event after the peak.
DeviceTimeline timeline_of(const Recorder& rec, DeviceType type, const std::vector<Event>& events,
                           const std::vector<const RawEvent*>& raw) {
  DeviceTimeline timeline;
  timeline.device = type;
  timeline.live_bytes = rec.live[static_cast<size_t>(type)];
  bool first = true;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& event = events[i];
    if (event.device.type != type) continue;
    if (first) {
      first = false;
      timeline.start_live_bytes = event.live_bytes - live_delta(event.action, event.bytes);
      timeline.peak_bytes = timeline.start_live_bytes;
      timeline.peak_time_us = rec.dropped == 0 ? rec.start_time_us : event.time_us;
    }
    if (event.live_bytes > timeline.peak_bytes) {
      timeline.peak_bytes = event.live_bytes;
      timeline.peak_time_us = event.time_us;
      timeline.peak_event = static_cast<int64_t>(i);
    }
  }

  std::unordered_map<BlockKey, LiveBlock, BlockKeyHash> alive;
  for (const auto& [key, block] : rec.blocks)
    if (key.type == type) alive.emplace(key, block);
  for (size_t i = events.size(); i-- > static_cast<size_t>(timeline.peak_event + 1);) {
    const RawEvent& event = *raw[i];
    if (event.device.type != type) continue;
    const BlockKey key{type, event.address};
    if (event.action == Action::alloc) {
      alive.erase(key);
    } else if (event.action == Action::free && event.origin_known) {
      alive[key] = LiveBlock{event.device, event.bytes, event.origin};
    }
  }
  int64_t tracked = 0;
  for (const auto& [key, block] : alive) {
    timeline.peak_blocks.push_back(rec.block_of(key, block));
    tracked += static_cast<int64_t>(block.bytes);
  }
  sort_largest_first(timeline.peak_blocks);
  timeline.peak_untracked_bytes = timeline.peak_bytes - tracked;
  return timeline;
}

std::vector<std::pair<DeviceType, MemoryStats>> all_allocator_stats() {
  std::vector<std::pair<DeviceType, MemoryStats>> out;
  for (DeviceType type : {DeviceType::cpu, DeviceType::cuda}) {
    const MemoryStats stats = memory_stats(type);
    // A device type with no allocator reports all zeros.
    if (type == DeviceType::cpu || stats.allocations > 0 || stats.reserved_bytes > 0 || stats.capacity_bytes > 0)
      out.emplace_back(type, stats);
  }
  return out;
}

}  // namespace

const char* action_name(Action action) {
  switch (action) {
    case Action::alloc:
      return "alloc";
    case Action::free:
      return "free";
    case Action::oom:
      return "oom";
  }
  return "?";
}

const DeviceTimeline* Snapshot::timeline(DeviceType type) const {
  for (const DeviceTimeline& timeline : devices)
    if (timeline.device == type) return &timeline;
  return nullptr;
}

void start(size_t max_events) {
  TITAN_CHECK(max_events > 0, "memory recording needs room for at least one event");
  // Read before taking our lock: the caching allocator locks its own mutex.
  std::array<int64_t, kNumDeviceTypes> live{};
  for (DeviceType type : {DeviceType::cpu, DeviceType::cuda})
    live[static_cast<size_t>(type)] = memory_stats(type).live_bytes;
  Recorder& rec = recorder();
  std::lock_guard<std::mutex> lock(rec.mutex);
  rec.max_events = max_events;
  rec.ring.clear();
  rec.ring.shrink_to_fit();
  rec.head = 0;
  rec.dropped = 0;
  rec.blocks.clear();
  rec.live = live;
  rec.start_time_us = now_us();
  rec.stop_time_us = 0;
  detail::recording_flag.store(true, std::memory_order_relaxed);
}

void stop() {
  Recorder& rec = recorder();
  std::lock_guard<std::mutex> lock(rec.mutex);
  if (!recording()) return;
  detail::recording_flag.store(false, std::memory_order_relaxed);
  rec.stop_time_us = now_us();
}

void record_alloc(Device device, const void* ptr, size_t bytes) noexcept {
  Recorder& rec = recorder();
  std::lock_guard<std::mutex> lock(rec.mutex);
  if (!recording()) return;  // stopped since the caller looked
  try {
    const int64_t time = now_us();
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    const Origin origin = rec.origin_here(time);
    int64_t& live = rec.live[static_cast<size_t>(device.type)];
    live += static_cast<int64_t>(bytes);
    rec.blocks[BlockKey{device.type, address}] = LiveBlock{device, bytes, origin};
    RawEvent event;
    event.time_us = time;
    event.action = Action::alloc;
    event.device = device;
    event.address = address;
    event.bytes = bytes;
    event.live_bytes = live;
    event.op = origin.op;
    event.module = origin.module;
    event.thread = origin.thread;
    rec.push(event);
  } catch (...) {
    ++rec.dropped;
  }
}

void record_free(Device device, const void* ptr, size_t bytes) noexcept {
  Recorder& rec = recorder();
  std::lock_guard<std::mutex> lock(rec.mutex);
  if (!recording()) return;
  try {
    const int64_t time = now_us();
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    const Origin here = rec.origin_here(time);
    RawEvent event;
    // A block allocated before recording began is not in the map: its bytes
    // still leave the live count, but nobody is known to have allocated it.
    const auto found = rec.blocks.find(BlockKey{device.type, address});
    if (found != rec.blocks.end()) {
      event.origin_known = true;
      event.origin = found->second.origin;
      rec.blocks.erase(found);
    }
    int64_t& live = rec.live[static_cast<size_t>(device.type)];
    live -= static_cast<int64_t>(bytes);
    event.time_us = time;
    event.action = Action::free;
    event.device = device;
    event.address = address;
    event.bytes = bytes;
    event.live_bytes = live;
    event.op = here.op;
    event.module = here.module;
    event.thread = here.thread;
    rec.push(event);
  } catch (...) {
    ++rec.dropped;
  }
}

Snapshot take() {
  Snapshot snapshot;
  snapshot.allocator_stats = all_allocator_stats();
  Recorder& rec = recorder();
  std::lock_guard<std::mutex> lock(rec.mutex);
  snapshot.recording = recording();
  snapshot.start_time_us = rec.start_time_us;
  snapshot.end_time_us = snapshot.recording ? now_us() : rec.stop_time_us;
  snapshot.max_events = rec.max_events;
  snapshot.dropped_events = rec.dropped;
  snapshot.events.reserve(rec.ring.size());
  std::vector<const RawEvent*> raw;
  raw.reserve(rec.ring.size());
  std::array<bool, kNumDeviceTypes> seen{};
  rec.for_each_event([&](const RawEvent& event) {
    Event out;
    out.time_us = event.time_us;
    out.action = event.action;
    out.device = event.device;
    out.address = event.address;
    out.bytes = event.bytes;
    out.live_bytes = event.live_bytes;
    out.op = rec.names[event.op];
    out.module = rec.names[event.module];
    out.thread = event.thread;
    snapshot.events.push_back(std::move(out));
    raw.push_back(&event);
    seen[static_cast<size_t>(event.device.type)] = true;
  });
  for (const auto& [key, block] : rec.blocks) snapshot.live_blocks.push_back(rec.block_of(key, block));
  sort_largest_first(snapshot.live_blocks);
  for (DeviceType type : {DeviceType::cpu, DeviceType::cuda, DeviceType::meta})
    if (seen[static_cast<size_t>(type)]) snapshot.devices.push_back(timeline_of(rec, type, snapshot.events, raw));
  return snapshot;
}

void set_out_of_memory_dump(std::string folder, std::string stem) {
  Recorder& rec = recorder();
  std::lock_guard<std::mutex> lock(rec.oom_mutex);
  oom_dump_enabled.store(!folder.empty(), std::memory_order_relaxed);
  rec.oom_folder = std::move(folder);
  rec.oom_stem = std::move(stem);
}

void on_allocation_failure(Device device, size_t bytes, const char* error) noexcept {
  if (!recording() && !oom_dump_enabled.load(std::memory_order_relaxed)) return;
  try {
    Recorder& rec = recorder();
    FailedAllocation failure;
    failure.time_us = now_us();
    failure.device = device;
    failure.bytes = bytes;
    if (const char* op = trace::current_op()) failure.op = op;
    if (const std::string* module = trace::current_module()) failure.module = *module;
    failure.thread = this_thread_id();
    failure.error = error != nullptr ? error : "";
    {
      std::lock_guard<std::mutex> lock(rec.mutex);
      if (recording()) {
        RawEvent event;
        event.time_us = failure.time_us;
        event.action = Action::oom;
        event.device = device;
        event.bytes = bytes;
        event.live_bytes = rec.live[static_cast<size_t>(device.type)];
        event.op = rec.intern(failure.op);
        event.module = rec.intern(failure.module);
        event.thread = failure.thread;
        rec.push(event);
      }
    }
    std::string folder, stem;
    {
      std::lock_guard<std::mutex> lock(rec.oom_mutex);
      folder = rec.oom_folder;
      stem = rec.oom_stem;
    }
    if (folder.empty()) return;
    // Without a recording the history is not known: the page then holds the
    // failed request and the allocators' counters only.
    Snapshot snapshot;
    if (recording()) {
      snapshot = take();
    } else {
      snapshot.allocator_stats = all_allocator_stats();
      snapshot.start_time_us = snapshot.end_time_us = failure.time_us;
    }
    snapshot.failure = std::move(failure);
    const std::string name = fmt::format("{}_oom", stem.empty() ? "memory" : stem);
    write_memory_snapshot(snapshot, folder, name);
    fmt::print(stderr, "titan: out of memory; memory snapshot written to {}.html\n",
               (std::filesystem::path(folder) / name).string());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan: warning: could not write the out-of-memory snapshot: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "titan: warning: could not write the out-of-memory snapshot\n");
  }
}

}  // namespace titan::memory
