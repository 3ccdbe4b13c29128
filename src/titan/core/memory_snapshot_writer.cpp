#include "titan/core/memory_snapshot_writer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/core/xml_escape.h"

namespace titan::memory {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

std::string hex_address(uintptr_t address) { return fmt::format("{:#x}", address); }

Json block_json(const Block& block) {
  return Json{{"device", block.device.str()},
              {"address", hex_address(block.address)},
              {"bytes", block.bytes},
              {"time_us", block.time_us},
              {"op", block.op},
              {"module", block.module},
              {"thread", block.thread}};
}

struct Total {
  std::string name;
  int64_t bytes = 0;
  int64_t blocks = 0;
};

// Bytes alive at the peak grouped by module (or op), largest first.
std::vector<Total> totals_by(const DeviceTimeline& timeline, std::string Block::*key) {
  std::map<std::string, Total> by_name;
  for (const Block& block : timeline.peak_blocks) {
    Total& total = by_name[block.*key];
    total.name = block.*key;
    total.bytes += static_cast<int64_t>(block.bytes);
    ++total.blocks;
  }
  std::vector<Total> out;
  out.reserve(by_name.size());
  for (auto& [name, total] : by_name) out.push_back(std::move(total));
  std::sort(out.begin(), out.end(), [](const Total& a, const Total& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return a.name < b.name;
  });
  return out;
}

Json totals_json(const std::vector<Total>& totals, const char* key) {
  Json out = Json::array();
  for (const Total& total : totals)
    out.push_back(Json{{key, total.name}, {"bytes", total.bytes}, {"blocks", total.blocks}});
  return out;
}

std::string human_bytes(int64_t bytes) {
  const double magnitude = std::abs(static_cast<double>(bytes));
  if (magnitude >= double(int64_t{1} << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30));
  if (magnitude >= double(1 << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20));
  if (magnitude >= double(1 << 10)) return fmt::format("{:.2f} KiB", static_cast<double>(bytes) / (1 << 10));
  return fmt::format("{} B", bytes);
}

std::string name_or_none(const std::string& name) { return name.empty() ? "(none)" : xml_escape(name); }

// Milliseconds since the window began, for the page.
std::string ms_since(int64_t time_us, int64_t origin_us) {
  return fmt::format("{:.3f} ms", static_cast<double>(time_us - origin_us) / 1000.0);
}

// The chart: a step curve of live bytes over the window. A long recording
// has far more events than pixels, so each half-pixel column keeps only the
// value entering it and its minimum, maximum and last value; the exact peak
// is drawn separately.
class Chart {
 public:
  static constexpr double kWidth = 1000, kHeight = 340;
  static constexpr double kLeft = 90, kRight = 30, kTop = 30, kBottom = 40;

  Chart(int64_t t0, int64_t t1, int64_t ymax) : t0_(t0), t1_(std::max(t1, t0 + 1)), ymax_(std::max<int64_t>(ymax, 1)) {}

  double x(int64_t time_us) const {
    const double clamped =
        std::clamp<double>(static_cast<double>(time_us), static_cast<double>(t0_), static_cast<double>(t1_));
    return kLeft + (clamped - t0_) / static_cast<double>(t1_ - t0_) * (kWidth - kLeft - kRight);
  }
  double y(int64_t bytes) const {
    return kTop + (1.0 - static_cast<double>(bytes) / static_cast<double>(ymax_)) * (kHeight - kTop - kBottom);
  }

  std::string curve(const std::vector<std::pair<int64_t, int64_t>>& points) const {
    std::string path;
    auto out = std::back_inserter(path);
    if (points.empty()) return path;
    fmt::format_to(out, "M{:.1f},{:.1f}", x(points[0].first), y(points[0].second));
    int64_t level = points[0].second;
    size_t i = 1;
    while (i < points.size()) {
      const long column = std::lround(x(points[i].first) * 2);
      int64_t low = points[i].second, high = points[i].second, last = points[i].second;
      for (; i < points.size() && std::lround(x(points[i].first) * 2) == column; ++i) {
        low = std::min(low, points[i].second);
        high = std::max(high, points[i].second);
        last = points[i].second;
      }
      fmt::format_to(out, "H{:.1f}", column / 2.0);
      for (int64_t value : {high, low, last}) {
        if (value == level) continue;
        fmt::format_to(out, "V{:.1f}", y(value));
        level = value;
      }
    }
    fmt::format_to(out, "H{:.1f}", x(t1_));
    return path;
  }

  std::string axes() const {
    std::string svg;
    auto out = std::back_inserter(svg);
    const double bottom = kHeight - kBottom, right = kWidth - kRight;
    fmt::format_to(out, R"(<line class="axis" x1="{0}" y1="{1}" x2="{2}" y2="{1}"/>)", kLeft, bottom, right);
    fmt::format_to(out, R"(<line class="axis" x1="{0}" y1="{1}" x2="{0}" y2="{2}"/>)", kLeft, kTop, bottom);
    for (int i = 0; i <= 4; ++i) {
      const int64_t bytes = ymax_ * i / 4;
      fmt::format_to(out, R"(<line class="grid" x1="{0}" y1="{1:.1f}" x2="{2}" y2="{1:.1f}"/>)", kLeft, y(bytes),
                     right);
      fmt::format_to(out, R"(<text class="tick" x="{}" y="{:.1f}" text-anchor="end">{}</text>)", kLeft - 6,
                     y(bytes) + 4, human_bytes(bytes));
      const int64_t time = t0_ + (t1_ - t0_) * i / 4;
      fmt::format_to(out, R"(<text class="tick" x="{:.1f}" y="{}" text-anchor="middle">{}</text>)", x(time),
                     bottom + 18, ms_since(time, t0_));
    }
    return svg;
  }

 private:
  int64_t t0_, t1_, ymax_;
};

std::string device_section(const Snapshot& snapshot, const DeviceTimeline& timeline) {
  std::string html;
  auto out = std::back_inserter(html);
  const char* device = device_type_name(timeline.device);
  // The window begins at start() unless the ring dropped older events.
  int64_t t0 = snapshot.start_time_us, t1 = snapshot.end_time_us;
  std::vector<std::pair<int64_t, int64_t>> points;
  int64_t ymax = std::max(timeline.peak_bytes, timeline.live_bytes);
  for (const Event& event : snapshot.events) {
    if (event.device.type != timeline.device) continue;
    if (points.empty()) {
      if (snapshot.dropped_events > 0) t0 = event.time_us;
      points.emplace_back(t0, timeline.start_live_bytes);
    }
    points.emplace_back(event.time_us, event.live_bytes);
    ymax = std::max(ymax, event.live_bytes);
    t1 = std::max(t1, event.time_us);
  }
  const bool failed_here = snapshot.failure && snapshot.failure->device.type == timeline.device;
  if (failed_here) {
    t1 = std::max(t1, snapshot.failure->time_us);
    ymax = std::max(ymax, timeline.live_bytes + static_cast<int64_t>(snapshot.failure->bytes));
  }
  const Chart chart(t0, t1, ymax + ymax / 10);

  fmt::format_to(out, "<h2>{}</h2>\n", device);
  fmt::format_to(out,
                 "<p>Peak <b>{}</b> ({} bytes) at {}; {} alive when the window began, {} at its end. "
                 "Sizes are what tensors asked for.</p>\n",
                 human_bytes(timeline.peak_bytes), timeline.peak_bytes, ms_since(timeline.peak_time_us, t0),
                 human_bytes(timeline.start_live_bytes), human_bytes(timeline.live_bytes));
  fmt::format_to(out, R"(<svg class="chart" viewBox="0 0 {} {}" width="{}" height="{}" role="img">)", Chart::kWidth,
                 Chart::kHeight, Chart::kWidth, Chart::kHeight);
  fmt::format_to(out, "<title>live {} memory over time</title>", device);
  html += chart.axes();
  fmt::format_to(out, R"(<path class="curve" d="{}"/>)", chart.curve(points));
  const double px = chart.x(timeline.peak_time_us), py = chart.y(timeline.peak_bytes);
  fmt::format_to(out, R"(<line class="peak" x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2}"/>)", px, py,
                 Chart::kHeight - Chart::kBottom);
  fmt::format_to(out, R"(<circle class="peak" cx="{:.1f}" cy="{:.1f}" r="4"><title>peak {}</title></circle>)", px, py,
                 human_bytes(timeline.peak_bytes));
  fmt::format_to(out, R"(<text class="label" x="{:.1f}" y="{:.1f}" text-anchor="{}">peak {}</text>)", px,
                 std::max(py - 8, Chart::kTop - 8), px > Chart::kWidth / 2 ? "end" : "start",
                 human_bytes(timeline.peak_bytes));
  if (failed_here) {
    const double fx = chart.x(snapshot.failure->time_us);
    fmt::format_to(out, R"(<line class="oom" x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}"/>)", fx, Chart::kTop,
                   Chart::kHeight - Chart::kBottom);
    fmt::format_to(out, R"(<text class="label oom-label" x="{:.1f}" y="{}" text-anchor="end">out of memory</text>)",
                   fx - 4, Chart::kTop + 12);
  }
  html += "</svg>\n";

  fmt::format_to(out, "<h3>Largest blocks alive at the peak ({} of {})</h3>\n",
                 std::min<size_t>(timeline.peak_blocks.size(), 50), timeline.peak_blocks.size());
  html +=
      "<table><tr><th>#</th><th>size</th><th>bytes</th><th>op</th><th>module</th><th>allocated at</th>"
      "<th>thread</th><th>address</th></tr>\n";
  for (size_t i = 0; i < timeline.peak_blocks.size() && i < 50; ++i) {
    const Block& block = timeline.peak_blocks[i];
    fmt::format_to(out,
                   "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                   "<td>{}</td></tr>\n",
                   i + 1, human_bytes(static_cast<int64_t>(block.bytes)), block.bytes, name_or_none(block.op),
                   name_or_none(block.module), ms_since(block.time_us, t0), block.thread, hex_address(block.address));
  }
  html += "</table>\n";

  for (const auto& [title, key, totals] : {std::tuple{"module", "module", totals_by(timeline, &Block::module)},
                                           std::tuple{"op", "op", totals_by(timeline, &Block::op)}}) {
    fmt::format_to(out, "<h3>Alive at the peak by {}</h3>\n", title);
    fmt::format_to(out, "<table><tr><th>{}</th><th>size</th><th>bytes</th><th>blocks</th><th>share</th></tr>\n", key);
    const double peak = static_cast<double>(std::max<int64_t>(timeline.peak_bytes, 1));
    for (const Total& total : totals) {
      fmt::format_to(out,
                     "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                     "<td class=\"num\">{:.1f}%</td></tr>\n",
                     name_or_none(total.name), human_bytes(total.bytes), total.bytes, total.blocks,
                     100.0 * static_cast<double>(total.bytes) / peak);
    }
    if (timeline.peak_untracked_bytes != 0) {
      fmt::format_to(out,
                     "<tr><td><i>allocated before recording</i></td><td>{}</td><td class=\"num\">{}</td><td></td>"
                     "<td class=\"num\">{:.1f}%</td></tr>\n",
                     human_bytes(timeline.peak_untracked_bytes), timeline.peak_untracked_bytes,
                     100.0 * static_cast<double>(timeline.peak_untracked_bytes) / peak);
    }
    html += "</table>\n";
  }
  return html;
}

constexpr const char* kStyle = R"(
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
svg.chart { border: 1px solid #ddd; background: #fff; max-width: 100%; height: auto; }
.axis { stroke: #444; stroke-width: 1; }
.grid { stroke: #eee; stroke-width: 1; }
.tick { font-size: 11px; fill: #555; }
.curve { fill: none; stroke: #1f6fb4; stroke-width: 1.5; }
line.peak { stroke: #d62728; stroke-dasharray: 4 3; }
circle.peak { fill: #d62728; }
.label { font-size: 12px; fill: #d62728; }
.oom { stroke: #9400d3; stroke-width: 2; }
.oom-label { fill: #9400d3; }
.failure { background: #fde8e8; border: 1px solid #d62728; padding: 0.5em 1em; }
)";

void write_atomically(const fs::path& path, const std::string& text) {
  static std::atomic<int> counter{0};
  const fs::path temporary = fmt::format("{}.tmp.{}.{}", path.string(), getpid(), counter.fetch_add(1));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    TITAN_CHECK(out.is_open(), "cannot write memory snapshot {}: {}", path.string(), std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (out.fail()) {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      fail("cannot write memory snapshot {}: write failed (disk full?)", path.string());
    }
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    fail("cannot write memory snapshot {}: {}", path.string(), error.message());
  }
}

}  // namespace

std::string snapshot_json(const Snapshot& snapshot) {
  Json json;
  json["format"] = "titan.memory_snapshot";
  json["version"] = 1;
  json["recording"] = snapshot.recording;
  json["start_time_us"] = snapshot.start_time_us;
  json["end_time_us"] = snapshot.end_time_us;
  json["max_events"] = snapshot.max_events;
  json["dropped_events"] = snapshot.dropped_events;
  Json events = Json::array();
  for (const Event& event : snapshot.events) {
    events.push_back(Json{{"time_us", event.time_us},
                          {"action", action_name(event.action)},
                          {"device", event.device.str()},
                          {"address", hex_address(event.address)},
                          {"bytes", event.bytes},
                          {"live_bytes", event.live_bytes},
                          {"op", event.op},
                          {"module", event.module},
                          {"thread", event.thread}});
  }
  json["events"] = std::move(events);
  Json live = Json::array();
  for (const Block& block : snapshot.live_blocks) live.push_back(block_json(block));
  json["live_blocks"] = std::move(live);
  Json devices = Json::array();
  for (const DeviceTimeline& timeline : snapshot.devices) {
    Json blocks = Json::array();
    for (const Block& block : timeline.peak_blocks) blocks.push_back(block_json(block));
    devices.push_back(Json{{"device", device_type_name(timeline.device)},
                           {"start_live_bytes", timeline.start_live_bytes},
                           {"live_bytes", timeline.live_bytes},
                           {"peak", Json{{"bytes", timeline.peak_bytes},
                                         {"time_us", timeline.peak_time_us},
                                         {"event", timeline.peak_event},
                                         {"untracked_bytes", timeline.peak_untracked_bytes},
                                         {"blocks", std::move(blocks)},
                                         {"by_module", totals_json(totals_by(timeline, &Block::module), "module")},
                                         {"by_op", totals_json(totals_by(timeline, &Block::op), "op")}}}});
  }
  json["devices"] = std::move(devices);
  if (snapshot.failure) {
    const FailedAllocation& failure = *snapshot.failure;
    json["failure"] = Json{{"time_us", failure.time_us}, {"device", failure.device.str()}, {"bytes", failure.bytes},
                           {"op", failure.op},           {"module", failure.module},       {"thread", failure.thread},
                           {"error", failure.error}};
  } else {
    json["failure"] = nullptr;
  }
  Json stats = Json::array();
  for (const auto& [type, s] : snapshot.allocator_stats) {
    stats.push_back(Json{{"device", device_type_name(type)},
                         {"live_bytes", s.live_bytes},
                         {"peak_bytes", s.peak_bytes},
                         {"reserved_bytes", s.reserved_bytes},
                         {"peak_reserved_bytes", s.peak_reserved_bytes},
                         {"allocations", s.allocations},
                         {"alloc_retries", s.alloc_retries},
                         {"capacity_bytes", s.capacity_bytes}});
  }
  json["allocator_stats"] = std::move(stats);
  // Replace, not throw, on names that are not valid UTF-8.
  return json.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
}

std::string snapshot_html(const Snapshot& snapshot) {
  std::string html;
  auto out = std::back_inserter(html);
  html += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>titan memory snapshot</title>";
  fmt::format_to(out, "<style>{}</style></head><body>\n<h1>Memory snapshot</h1>\n", kStyle);
  fmt::format_to(out, "<p>{} events recorded over {}{}{}.</p>\n", snapshot.events.size(),
                 ms_since(snapshot.end_time_us, snapshot.start_time_us),
                 snapshot.dropped_events > 0 ? fmt::format("; the {} oldest were dropped (at most {} kept)",
                                                           snapshot.dropped_events, snapshot.max_events)
                                             : std::string(),
                 snapshot.recording ? "; still recording when taken" : "");
  if (snapshot.failure) {
    const FailedAllocation& failure = *snapshot.failure;
    fmt::format_to(out,
                   "<div class=\"failure\"><h2>Out of memory</h2><p>A request for <b>{}</b> ({} bytes) on {} failed "
                   "in op <b>{}</b>, module <b>{}</b> (thread {}).</p><p>{}</p></div>\n",
                   human_bytes(static_cast<int64_t>(failure.bytes)), failure.bytes, failure.device.str(),
                   name_or_none(failure.op), name_or_none(failure.module), failure.thread, xml_escape(failure.error));
  }
  for (const DeviceTimeline& timeline : snapshot.devices) html += device_section(snapshot, timeline);
  if (snapshot.devices.empty()) html += "<p>No allocations were recorded.</p>\n";
  if (!snapshot.allocator_stats.empty()) {
    html +=
        "<h2>Allocator counters</h2>\n<table><tr><th>device</th><th>live</th><th>peak</th><th>reserved</th>"
        "<th>peak reserved</th><th>allocations</th><th>retries</th><th>capacity</th></tr>\n";
    for (const auto& [type, s] : snapshot.allocator_stats) {
      fmt::format_to(out,
                     "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td>"
                     "<td class=\"num\">{}</td><td>{}</td></tr>\n",
                     device_type_name(type), human_bytes(s.live_bytes), human_bytes(s.peak_bytes),
                     human_bytes(s.reserved_bytes), human_bytes(s.peak_reserved_bytes), s.allocations, s.alloc_retries,
                     s.capacity_bytes > 0 ? human_bytes(s.capacity_bytes) : "unknown");
    }
    html += "</table>\n";
  }
  html += "</body></html>\n";
  return html;
}

void write_memory_snapshot(const Snapshot& snapshot, const std::string& folder, const std::string& stem) {
  TITAN_CHECK(!stem.empty(), "memory snapshot: empty file stem");
  const fs::path dir(folder.empty() ? "." : folder);
  std::error_code error;
  fs::create_directories(dir, error);
  TITAN_CHECK(!error, "cannot create memory snapshot folder {}: {}", dir.string(), error.message());
  write_atomically(dir / (stem + ".json"), snapshot_json(snapshot));
  write_atomically(dir / (stem + ".html"), snapshot_html(snapshot));
}

}  // namespace titan::memory
