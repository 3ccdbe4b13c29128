// Writes a memory snapshot (memory_recorder.h) as <stem>.json, for tools,
// and <stem>.html, a page that needs nothing but a browser (no network: the
// chart is an inline SVG): live memory over the recorded window per device
// with the peak marked, the largest blocks alive at the peak, and the bytes
// alive at the peak by module and by op.
//
// JSON keys (times in µs of the steady clock, sizes in bytes):
//   format ("titan.memory_snapshot"), version (1), recording, start_time_us,
//   end_time_us, max_events, dropped_events,
//   events: [{time_us, action ("alloc" | "free" | "oom"), device ("cuda:0"),
//             address ("0x..."), bytes, live_bytes (on that device type, after),
//             op, module, thread}], oldest first,
//   live_blocks: [block], largest first, where block is
//             {device, address, bytes, time_us (allocated), op, module, thread},
//   devices: [{device ("cpu" | "cuda"), start_live_bytes, live_bytes,
//              peak: {bytes, time_us, event (index into events, -1: the start),
//                     untracked_bytes (allocated before recording),
//                     blocks: [block], by_module: [{module, bytes, blocks}],
//                     by_op: [{op, bytes, blocks}]}}],
//   failure: null or {time_us, device, bytes, op, module, thread, error},
//   allocator_stats: [{device, live_bytes, peak_bytes, reserved_bytes,
//                      peak_reserved_bytes, allocations, alloc_retries, capacity_bytes}].
// "" for op or module means outside every op or module.
#pragma once

#include <string>

#include "titan/core/memory_recorder.h"

namespace titan::memory {

std::string snapshot_json(const Snapshot& snapshot);
std::string snapshot_html(const Snapshot& snapshot);
// Writes <folder>/<stem>.json and <folder>/<stem>.html (creating the folder),
// each atomically; titan::Error naming the file on failure.
void write_memory_snapshot(const Snapshot& snapshot, const std::string& folder, const std::string& stem);

}  // namespace titan::memory
